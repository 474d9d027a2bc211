//! `l1gate keys`: the keys file — add, rotate, revoke, list, limits and roles.

use access::keys::{KeysError, KeysFile};
use anyhow::Context as _;
use l1gate::cli::{KeysArgs, KeysCommand};

pub(crate) fn run(args: KeysArgs) -> anyhow::Result<()> {
    let keys_file = args.keys_file;
    // Every change is a read-modify-write under the file's lock: parallel
    // commands never lose each other's changes.
    let edit = |change: &mut dyn FnMut(&mut KeysFile) -> Result<(), KeysError>| {
        KeysFile::edit(&keys_file, |file| change(file))
    };
    match args.command {
        KeysCommand::Add { account } => {
            let mut created = None;
            edit(&mut |file| {
                created = Some(file.add_key(&account, common::unix_now_ms())?);
                Ok(())
            })?;
            let (key, stored) = created.context("no key was created")?;
            println!(
                "created key {} for account {account} in {} (only its SHA-256 is stored; this is the only time it is shown)",
                stored.id,
                keys_file.display()
            );
            println!("{key}");
        }
        KeysCommand::List => list_keys(&KeysFile::load(&keys_file)?),
        KeysCommand::Revoke { key_id } => {
            edit(&mut |file| file.revoke(&key_id))?;
            println!("revoked {key_id}");
        }
        KeysCommand::Allow { key_id, cidr } => {
            let mut added = Vec::with_capacity(cidr.len());
            edit(&mut |file| {
                added.clear();
                for entry in &cidr {
                    added.push(file.allow(&key_id, entry)?);
                }
                Ok(())
            })?;
            println!("{key_id} allows {}", added.join(", "));
        }
        KeysCommand::Limits {
            account,
            requests_per_second,
            request_burst,
            max_streams,
            reset,
        } => {
            let limits = access::keys::AccountLimits {
                requests_per_second,
                request_burst,
                max_streams,
            };
            edit(&mut |file| file.set_limits(&account, limits, reset))?;
            println!("limits of account {account} updated");
        }
        KeysCommand::Role { account, role } => {
            edit(&mut |file| file.set_role(&account, role))?;
            let role = match role {
                access::keys::Role::Admin => "admin",
                access::keys::Role::User => "user",
            };
            println!("account {account} is now {role}");
        }
        KeysCommand::Rotate { key_id, grace } => {
            let now = common::unix_now_ms();
            let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
            let mut created = None;
            edit(&mut |file| {
                created = Some(file.rotate(&key_id, now, grace_ms)?);
                Ok(())
            })?;
            let (key, stored) = created.context("no key was created")?;
            println!(
                "rotated {key_id}: new key {} in {} (same account, allow-list and quota; only its SHA-256 is stored; this is the only time it is shown)",
                stored.id,
                keys_file.display()
            );
            println!(
                "{key_id} keeps working until {} (grace {}), then is refused and its open streams end",
                feeds::time::format_iso8601_ms(now.saturating_add(grace_ms)),
                humantime_short(grace)
            );
            println!("{key}");
        }
        KeysCommand::Quota {
            key_id,
            requests,
            bytes,
            period,
            clear,
        } => {
            let quota = if clear {
                None
            } else {
                let period = period.context("--period is required with --requests or --bytes")?;
                Some(access::quota::Quota {
                    period,
                    requests,
                    bytes,
                })
            };
            edit(&mut |file| file.set_quota(&key_id, quota))?;
            match quota {
                Some(quota) => println!("quota of {key_id}: {}", quota.describe()),
                None => println!("{key_id} has no quota"),
            }
        }
        KeysCommand::Disallow { key_id, cidr } => {
            let mut absent = Vec::new();
            let mut left = Vec::new();
            edit(&mut |file| {
                absent.clear();
                for entry in &cidr {
                    if !file.disallow(&key_id, entry)? {
                        absent.push(entry.clone());
                    }
                }
                left = file
                    .accounts
                    .iter()
                    .flat_map(|a| &a.keys)
                    .find(|k| k.id == key_id)
                    .map_or_else(Vec::new, |k| k.allow_list.clone());
                Ok(())
            })?;
            for entry in absent {
                println!("{key_id} did not list {entry}");
            }
            if left.is_empty() {
                println!("{key_id} has no IP allow-list: usable from any address");
            } else {
                println!("{key_id} allows {}", left.join(", "));
            }
        }
    }
    Ok(())
}

/// A grace period as `keys rotate` takes it (`24h`, `7d`, `90m`, `0s`):
/// days from two days on.
fn humantime_short(duration: std::time::Duration) -> String {
    let secs = duration.as_secs();
    for (unit, size, from) in [("d", 86_400, 172_800), ("h", 3_600, 3_600), ("m", 60, 60)] {
        if secs >= from && secs.is_multiple_of(size) {
            return format!("{}{unit}", secs / size);
        }
    }
    if duration.subsec_millis() == 0 {
        format!("{secs}s")
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// `keys list`: accounts with limits, then one line per key: account, id,
/// state (`active`, `revoked`, or `rotated → NEW, grace until TIME` /
/// `grace ended TIME`), creation, allow-list, then `quota=…` and
/// `replaces=OLD` when set.
fn list_keys(file: &KeysFile) {
    let now = common::unix_now_ms();
    for account in &file.accounts {
        let limits = [
            ("requests_per_second", account.requests_per_second),
            ("request_burst", account.request_burst),
            ("max_streams", account.max_streams),
        ];
        if limits.iter().any(|(_, v)| v.is_some()) {
            let shown: Vec<String> = limits
                .iter()
                .map(|(name, value)| {
                    format!(
                        "{name}={}",
                        value.map_or_else(|| "default".to_owned(), |v| v.to_string())
                    )
                })
                .collect();
            println!("{}\tlimits\t{}", account.name, shown.join("\t"));
        }
        if account.role == access::keys::Role::Admin {
            println!("{}\trole\tadmin", account.name);
        }
        for key in &account.keys {
            let state = match &key.rotated {
                _ if key.revoked => "revoked".to_owned(),
                None => "active".to_owned(),
                Some(rotation) => format!(
                    "rotated → {}, grace {} {}",
                    rotation.replaced_by,
                    if now < rotation.grace_until_ms {
                        "until"
                    } else {
                        "ended"
                    },
                    feeds::time::format_iso8601_ms(rotation.grace_until_ms)
                ),
            };
            let allow = if key.allow_list.is_empty() {
                "any".to_owned()
            } else {
                key.allow_list.join(",")
            };
            let quota = key
                .quota
                .map(|quota| format!("\tquota={}", quota.describe()))
                .unwrap_or_default();
            let replaces = key
                .rotated_from
                .as_ref()
                .map(|old| format!("\treplaces={old}"))
                .unwrap_or_default();
            println!(
                "{}\t{}\t{state}\tcreated_ms={}\tallow_list={allow}{quota}{replaces}",
                account.name, key.id, key.created_ms
            );
        }
    }
}
