//! What a status page shows of key usage: every key's usage this period,
//! its quota and rotation, and the rotations still in their grace period
//! ([`crate::Access::usage_report`]).

use crate::keys::Rotation;
use crate::quota::{Period, Quota};

/// One key's usage this period (see [`Access::usage_report`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyUsageReport {
    /// The key's id.
    pub key_id: String,
    /// Its account.
    pub account: String,
    /// Admitted requests this period.
    pub requests: u64,
    /// Bytes sent to the client this period.
    pub bytes: u64,
    /// The period usage is counted over (the quota's; a month without one).
    pub period: Period,
    /// Its start, Unix ms.
    pub period_start_ms: i64,
    /// Its end, when usage starts again from zero, Unix ms.
    pub period_end_ms: i64,
    /// Its quota, if it has one.
    pub quota: Option<Quota>,
    /// Its rotation, if it was rotated.
    pub rotation: Option<Rotation>,
}

/// A rotated key still in its grace period.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PendingRotation {
    /// The old key's id.
    pub key_id: String,
    /// Its account.
    pub account: String,
    /// When, by which key, and until when it works.
    pub rotation: Rotation,
}

/// Every key's usage and the pending rotations, at `now_ms`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UsageReport {
    /// When it was taken (access clock), Unix ms.
    pub now_ms: i64,
    /// Every key in force, by account and key id.
    pub keys: Vec<KeyUsageReport>,
    /// Rotated keys whose grace period has not ended.
    pub pending_rotations: Vec<PendingRotation>,
}
