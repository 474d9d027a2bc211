//! The recent warnings the status page lists: a `tracing` layer keeping the
//! newest [`KEPT`] WARN and ERROR events of the process in memory, each as
//! its time, level and one line of text (the message, then its fields as
//! `name=value`).
//!
//! Nothing a warning can hold is secret: l1gate never logs a key (only key
//! ids), and an upstream's credential never reaches a log line.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::OnceLock;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;

/// How many warnings are kept.
pub const KEPT: usize = 100;

/// Longest text kept of one warning.
const MAX_TEXT: usize = 600;

/// One kept warning.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    /// When it was logged, ISO-8601 UTC with milliseconds.
    pub time: String,
    /// `WARN` or `ERROR`.
    pub level: &'static str,
    /// The message and fields.
    pub message: String,
}

fn ring() -> &'static Mutex<VecDeque<Warning>> {
    static RING: OnceLock<Mutex<VecDeque<Warning>>> = OnceLock::new();
    RING.get_or_init(|| Mutex::new(VecDeque::with_capacity(KEPT)))
}

/// The kept warnings, oldest first.
pub fn recent() -> Vec<Warning> {
    ring().lock().iter().cloned().collect()
}

/// Keeps `warning`, dropping the oldest beyond [`KEPT`].
pub fn keep(warning: Warning) {
    let mut ring = ring().lock();
    if ring.len() == KEPT {
        ring.pop_front();
    }
    ring.push_back(warning);
}

/// The layer to install beside the log output.
#[derive(Debug, Clone, Copy, Default)]
pub struct WarningLayer;

impl<S: Subscriber> tracing_subscriber::Layer<S> for WarningLayer {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let level = match *event.metadata().level() {
            Level::ERROR => "ERROR",
            Level::WARN => "WARN",
            _ => return,
        };
        let mut text = Text::default();
        event.record(&mut text);
        let mut message = text.message;
        if !text.fields.is_empty() {
            if !message.is_empty() {
                message.push(' ');
            }
            message.push_str(&text.fields);
        }
        if message.len() > MAX_TEXT {
            let mut cut = MAX_TEXT;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        keep(Warning {
            time: feeds::time::format_iso8601_ms(common::unix_now_ms()),
            level,
            message,
        });
    }
}

#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            if !self.fields.is_empty() {
                self.fields.push(' ');
            }
            let _ = write!(self.fields, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            if !self.fields.is_empty() {
                self.fields.push(' ');
            }
            let _ = write!(self.fields, "{}={value}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn warnings_and_errors_are_kept_with_their_fields_and_nothing_else() {
        let subscriber = tracing_subscriber::registry().with(WarningLayer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not kept");
            tracing::warn!(
                feed = "fills",
                age_ms = 31_000,
                "status-test: data is stale"
            );
            tracing::error!("status-test: engine stopped");
        });
        let kept: Vec<Warning> = recent()
            .into_iter()
            .filter(|w| w.message.contains("status-test"))
            .collect();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(kept[0].level, "WARN");
        assert_eq!(
            kept[0].message,
            "status-test: data is stale feed=fills age_ms=31000"
        );
        assert_eq!(kept[1].level, "ERROR");
        assert!(kept[1].time.ends_with('Z'));
    }

    #[test]
    fn the_ring_keeps_the_newest() {
        for i in 0..KEPT + 5 {
            keep(Warning {
                time: String::new(),
                level: "WARN",
                message: format!("ring-test {i}"),
            });
        }
        let all = recent();
        assert!(all.len() <= KEPT);
        assert!(
            all.iter()
                .any(|w| w.message == format!("ring-test {}", KEPT + 4))
        );
        assert!(!all.iter().any(|w| w.message == "ring-test 0"));
    }
}
