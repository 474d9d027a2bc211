//! AWS credentials (and a profile's region) from the standard places, in
//! the AWS command line's order:
//!
//! 1. a profile named on the command line (`--profile`): its keys, nothing
//!    else;
//! 2. the environment: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, with
//!    `AWS_SESSION_TOKEN` when set;
//! 3. the profile `AWS_PROFILE` names, else `default`: its keys in the
//!    shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//!    `~/.aws/credentials`, sections `[NAME]`), else in the config file
//!    (`AWS_CONFIG_FILE`, else `~/.aws/config`, sections `[profile NAME]`,
//!    and `[default]`).
//!
//! A key in the credentials file wins over the same key in the config file.
//! The profile's `region` is read from either file. Roles, SSO, credential
//! processes and instance metadata are not supported: a profile that uses
//! them is named in the error, with the way to export its keys.
//!
//! The environment is passed in as a lookup function, so tests need not
//! touch the process's.

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// An access key pair, with the session token of temporary credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (`AKIA…`, `ASIA…`).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl fmt::Debug for Credentials {
    // Never the secret or the token: errors and logs may print this.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"…")
            .field("session_token", &self.session_token.as_ref().map(|_| "…"))
            .finish()
    }
}

/// What [`resolve`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The credentials.
    pub credentials: Credentials,
    /// Where they came from, for messages (`the environment
    /// (AWS_ACCESS_KEY_ID)`, `profile "default" in /root/.aws/credentials`).
    pub source: String,
    /// The profile's `region`, when its files set one.
    pub profile_region: Option<String>,
}

/// Why no credentials could be had.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// Nothing anywhere.
    #[error(
        "no AWS credentials: the archive's buckets are requester-pays and refuse anonymous \
         requests. Looked in: {looked}. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
         give the profile aws_access_key_id and aws_secret_access_key"
    )]
    NotFound {
        /// Every place looked in, and what was there.
        looked: String,
    },
    /// A profile named by `--profile` or `AWS_PROFILE` that neither file has.
    #[error("AWS profile {profile:?} ({named_by}) is in neither {credentials} nor {config}")]
    NoSuchProfile {
        /// The profile.
        profile: String,
        /// `--profile` or `AWS_PROFILE`.
        named_by: String,
        /// The credentials file.
        credentials: String,
        /// The config file.
        config: String,
    },
    /// A profile with one key of the pair and not the other.
    #[error("AWS profile {profile:?} in {path} has {has} but not {lacks}")]
    HalfKey {
        /// The profile.
        profile: String,
        /// The file holding the key it has.
        path: String,
        /// The key present.
        has: String,
        /// The key missing.
        lacks: String,
    },
    /// A profile that gets its keys in a way l1gate does not support.
    #[error(
        "AWS profile {profile:?} uses {how}, which l1gate does not support: export its keys with \
         `aws configure export-credentials --profile {profile} --format env` and run again"
    )]
    Unsupported {
        /// The profile.
        profile: String,
        /// The setting (`role_arn`, `credential_process`, `sso_session`, …).
        how: String,
    },
    /// A line that is no section, setting or comment.
    #[error("{path}: line {line}: expected [section], name = value or a comment")]
    Malformed {
        /// The file.
        path: String,
        /// Its line number, from 1.
        line: usize,
    },
    /// A file that exists but cannot be read.
    #[error("{path}: {message}")]
    Unreadable {
        /// The file.
        path: String,
        /// The I/O error.
        message: String,
    },
}

/// Settings that get keys some way other than a key pair in the file.
const UNSUPPORTED: [&str; 5] = [
    "role_arn",
    "credential_process",
    "sso_session",
    "sso_start_url",
    "web_identity_token_file",
];

/// Finds credentials for `profile_flag` (`--profile`) with `env` as the
/// environment.
///
/// # Errors
/// [`CredentialsError`]: none found (naming every place looked in), a named
/// profile that does not exist, a half key pair, an unsupported profile, or
/// an unreadable or malformed file.
pub fn resolve(
    profile_flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, CredentialsError> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let (profile, named_by) = match (profile_flag, set("AWS_PROFILE")) {
        (Some(flag), _) => (flag.to_owned(), Some("--profile")),
        (None, Some(name)) => (name, Some("AWS_PROFILE")),
        (None, None) => ("default".to_owned(), None),
    };
    let home = set("HOME").map(PathBuf::from);
    let file_path = |var: &str, default: &str| {
        set(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
    };
    let credentials_path = file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let config_path = file_path("AWS_CONFIG_FILE", "config");
    let from_credentials = read_profile(credentials_path.as_deref(), &profile, false)?;
    let from_config = read_profile(config_path.as_deref(), &profile, true)?;
    let profile_region = from_credentials
        .get("region")
        .or_else(|| from_config.get("region"));

    let environment = (
        set("AWS_ACCESS_KEY_ID"),
        set("AWS_SECRET_ACCESS_KEY"),
        set("AWS_SESSION_TOKEN"),
    );
    if profile_flag.is_none()
        && let (Some(access_key_id), Some(secret_access_key), session_token) = environment.clone()
    {
        return Ok(Resolved {
            credentials: Credentials {
                access_key_id,
                secret_access_key,
                session_token,
            },
            source: "the environment (AWS_ACCESS_KEY_ID)".to_owned(),
            profile_region,
        });
    }

    let shown = |path: &Option<PathBuf>| {
        path.as_ref()
            .map_or_else(|| "(no HOME)".to_owned(), |p| p.display().to_string())
    };
    let key = |name: &str| from_credentials.get(name).or_else(|| from_config.get(name));
    // The file a key comes from: the credentials file's wins.
    let holder = |name: &str| {
        if from_credentials.get(name).is_some() {
            shown(&credentials_path)
        } else {
            shown(&config_path)
        }
    };
    match (key("aws_access_key_id"), key("aws_secret_access_key")) {
        (Some(access_key_id), Some(secret_access_key)) => {
            return Ok(Resolved {
                source: format!("profile {profile:?} in {}", holder("aws_access_key_id")),
                credentials: Credentials {
                    access_key_id,
                    secret_access_key,
                    session_token: key("aws_session_token"),
                },
                profile_region,
            });
        }
        (Some(_), None) => {
            return Err(CredentialsError::HalfKey {
                path: holder("aws_access_key_id"),
                profile,
                has: "aws_access_key_id".to_owned(),
                lacks: "aws_secret_access_key".to_owned(),
            });
        }
        (None, Some(_)) => {
            return Err(CredentialsError::HalfKey {
                path: holder("aws_secret_access_key"),
                profile,
                has: "aws_secret_access_key".to_owned(),
                lacks: "aws_access_key_id".to_owned(),
            });
        }
        (None, None) => {}
    }
    if let Some(how) = UNSUPPORTED.iter().find(|name| key(name).is_some()) {
        return Err(CredentialsError::Unsupported {
            profile,
            how: (*how).to_owned(),
        });
    }
    if let Some(named_by) = named_by
        && !from_credentials.found
        && !from_config.found
    {
        return Err(CredentialsError::NoSuchProfile {
            profile,
            named_by: named_by.to_owned(),
            credentials: shown(&credentials_path),
            config: shown(&config_path),
        });
    }
    let describe = |path: &Option<PathBuf>, settings: &Profile| {
        let what = match (path, settings.file_exists, settings.found) {
            (None, _, _) => "no HOME to find it",
            (Some(_), false, _) => "no such file",
            (Some(_), true, false) => "no such profile",
            (Some(_), true, true) => "the profile has no keys",
        };
        format!("profile {profile:?} in {} ({what})", shown(path))
    };
    let env_note = if profile_flag.is_some() {
        "the environment (not read: --profile was given)"
    } else {
        match environment {
            (None, None, _) => "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: unset)",
            (Some(_), None, _) => "the environment (AWS_SECRET_ACCESS_KEY unset)",
            (None, Some(_), _) => "the environment (AWS_ACCESS_KEY_ID unset)",
            (Some(_), Some(_), _) => "the environment",
        }
    };
    Err(CredentialsError::NotFound {
        looked: format!(
            "{env_note}; {}; {}",
            describe(&credentials_path, &from_credentials),
            describe(&config_path, &from_config)
        ),
    })
}

/// One profile's settings in one file.
#[derive(Debug, Default)]
struct Profile {
    /// The file exists.
    file_exists: bool,
    /// The file has the profile's section.
    found: bool,
    /// `name = value` of the section, names lower-cased; a name given twice
    /// keeps its last value.
    settings: Vec<(String, String)>,
}

impl Profile {
    fn get(&self, name: &str) -> Option<String> {
        self.settings
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    }
}

/// The section of `profile` in the file at `path` (none if there is no
/// such file); `config` says the file names sections `[profile NAME]`.
fn read_profile(
    path: Option<&Path>,
    profile: &str,
    config: bool,
) -> Result<Profile, CredentialsError> {
    let Some(path) = path else {
        return Ok(Profile::default());
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Profile::default()),
        Err(e) => {
            return Err(CredentialsError::Unreadable {
                path: path.display().to_string(),
                message: e.to_string(),
            });
        }
    };
    let mut profile_settings =
        parse_section(&text, profile, config).map_err(|line| CredentialsError::Malformed {
            path: path.display().to_string(),
            line,
        })?;
    profile_settings.file_exists = true;
    Ok(profile_settings)
}

/// The settings of `profile`'s section(s) in an INI-style AWS file: `[NAME]`
/// in the credentials file; `[profile NAME]` in the config file, where the
/// default profile is `[default]` (or `[profile default]`). Lines starting
/// with `#` or `;` are comments; indented lines continue a nested setting
/// (`s3 =` then `  max_concurrent_requests = 10`) and are skipped.
///
/// # Errors
/// The number of the first line that is none of these.
fn parse_section(text: &str, profile: &str, config: bool) -> Result<Profile, usize> {
    let mut out = Profile::default();
    let mut inside = false;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[') {
            let Some(name) = section.strip_suffix(']') else {
                return Err(index + 1);
            };
            let name = name.trim();
            let this = if config {
                let named = name
                    .strip_prefix("profile")
                    .filter(|rest| rest.starts_with(char::is_whitespace))
                    .map(str::trim);
                named == Some(profile) || (profile == "default" && name == "default")
            } else {
                name == profile
            };
            inside = this;
            out.found |= this;
            continue;
        }
        if raw.starts_with(char::is_whitespace) {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return Err(index + 1);
        };
        if inside {
            out.settings
                .push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Home {
        dir: tempfile::TempDir,
        env: HashMap<String, String>,
    }

    impl Home {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join(".aws")).unwrap();
            let env = HashMap::from([("HOME".to_owned(), dir.path().display().to_string())]);
            Self { dir, env }
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.dir.path().join(".aws").join(name);
            std::fs::write(&path, text).unwrap();
            path
        }

        fn set(mut self, name: &str, value: &str) -> Self {
            self.env.insert(name.to_owned(), value.to_owned());
            self
        }

        fn resolve(&self, profile: Option<&str>) -> Result<Resolved, CredentialsError> {
            resolve(profile, &|name| self.env.get(name).cloned())
        }
    }

    const CREDENTIALS: &str = "\
# keys
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = secret-default

[work]
aws_access_key_id=AKIDWORK
aws_secret_access_key=secret-work
aws_session_token = token-work
";

    const CONFIG: &str = "\
[default]
region = eu-west-1

[profile work]
region = us-west-2
s3 =
  max_concurrent_requests = 20

[profile configonly]
; keys kept in the config file
aws_access_key_id = AKIDCONFIG
aws_secret_access_key = secret-config
region = ap-northeast-1

[profile assumed]
role_arn = arn:aws:iam::123456789012:role/reader
source_profile = default
";

    #[test]
    fn the_environment_comes_before_the_files() {
        let home = Home::new()
            .set("AWS_ACCESS_KEY_ID", "AKIDENV")
            .set("AWS_SECRET_ACCESS_KEY", "secret-env")
            .set("AWS_SESSION_TOKEN", "token-env");
        home.write("credentials", CREDENTIALS);
        home.write("config", CONFIG);
        let found = home.resolve(None).unwrap();
        assert_eq!(
            found.credentials,
            Credentials {
                access_key_id: "AKIDENV".into(),
                secret_access_key: "secret-env".into(),
                session_token: Some("token-env".into()),
            }
        );
        assert_eq!(found.source, "the environment (AWS_ACCESS_KEY_ID)");
        // The default profile's region still counts.
        assert_eq!(found.profile_region.as_deref(), Some("eu-west-1"));
    }

    #[test]
    fn a_profile_on_the_command_line_wins_over_the_environment() {
        let home = Home::new()
            .set("AWS_ACCESS_KEY_ID", "AKIDENV")
            .set("AWS_SECRET_ACCESS_KEY", "secret-env");
        let path = home.write("credentials", CREDENTIALS);
        home.write("config", CONFIG);
        let found = home.resolve(Some("work")).unwrap();
        assert_eq!(found.credentials.access_key_id, "AKIDWORK");
        assert_eq!(
            found.credentials.session_token.as_deref(),
            Some("token-work")
        );
        assert_eq!(
            found.source,
            format!("profile \"work\" in {}", path.display())
        );
        assert_eq!(found.profile_region.as_deref(), Some("us-west-2"));
    }

    #[test]
    fn aws_profile_picks_the_profile_and_the_config_file_can_hold_keys() {
        let home = Home::new().set("AWS_PROFILE", "configonly");
        home.write("credentials", CREDENTIALS);
        let config = home.write("config", CONFIG);
        let found = home.resolve(None).unwrap();
        assert_eq!(found.credentials.access_key_id, "AKIDCONFIG");
        assert_eq!(found.credentials.secret_access_key, "secret-config");
        assert_eq!(found.credentials.session_token, None);
        assert_eq!(
            found.source,
            format!("profile \"configonly\" in {}", config.display())
        );
        assert_eq!(found.profile_region.as_deref(), Some("ap-northeast-1"));
    }

    #[test]
    fn the_default_profile_and_files_named_by_the_environment() {
        let home = Home::new();
        let elsewhere = home.dir.path().join("creds.ini");
        std::fs::write(&elsewhere, CREDENTIALS).unwrap();
        let home = home.set(
            "AWS_SHARED_CREDENTIALS_FILE",
            &elsewhere.display().to_string(),
        );
        let found = home.resolve(None).unwrap();
        assert_eq!(found.credentials.access_key_id, "AKIDDEFAULT");
        assert_eq!(found.profile_region, None);
    }

    #[test]
    fn the_credentials_file_wins_over_the_config_file() {
        let home = Home::new();
        home.write(
            "credentials",
            "[both]\naws_access_key_id = AKIDCRED\naws_secret_access_key = s1\n",
        );
        home.write(
            "config",
            "[profile both]\naws_access_key_id = AKIDCONF\naws_secret_access_key = s2\n",
        );
        let found = home.resolve(Some("both")).unwrap();
        assert_eq!(found.credentials.access_key_id, "AKIDCRED");
        assert_eq!(found.credentials.secret_access_key, "s1");
    }

    #[test]
    fn nothing_found_says_where_it_looked() {
        let home = Home::new();
        let error = home.resolve(None).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("requester-pays"), "{text}");
        assert!(text.contains("AWS_ACCESS_KEY_ID"), "{text}");
        assert!(
            text.contains(&format!(
                "profile \"default\" in {} (no such file)",
                home.dir.path().join(".aws/credentials").display()
            )),
            "{text}"
        );
        assert!(text.contains(".aws/config (no such file)"), "{text}");
        // A profile with only a region has no keys.
        home.write("config", CONFIG);
        let text = home.resolve(None).unwrap_err().to_string();
        assert!(text.contains("(the profile has no keys)"), "{text}");
    }

    #[test]
    fn a_named_profile_that_does_not_exist_is_an_error() {
        let home = Home::new();
        home.write("credentials", CREDENTIALS);
        assert!(matches!(
            home.resolve(Some("nope")),
            Err(CredentialsError::NoSuchProfile { profile, named_by, .. })
                if profile == "nope" && named_by == "--profile"
        ));
    }

    #[test]
    fn half_keys_and_unsupported_profiles_are_named() {
        let home = Home::new();
        home.write("credentials", "[half]\naws_access_key_id = AKIDHALF\n");
        home.write("config", CONFIG);
        assert!(matches!(
            home.resolve(Some("half")),
            Err(CredentialsError::HalfKey { lacks, .. }) if lacks == "aws_secret_access_key"
        ));
        assert_eq!(
            home.resolve(Some("assumed")),
            Err(CredentialsError::Unsupported {
                profile: "assumed".into(),
                how: "role_arn".into()
            })
        );
    }

    #[test]
    fn malformed_lines_are_reported_with_their_number() {
        let home = Home::new();
        let path = home.write("credentials", "[default]\naws_access_key_id AKID\n");
        assert_eq!(
            home.resolve(None),
            Err(CredentialsError::Malformed {
                path: path.display().to_string(),
                line: 2
            })
        );
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let credentials = Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("token".into()),
        };
        let shown = format!("{credentials:?}");
        assert!(shown.contains("AKID"));
        assert!(
            !shown.contains("very-secret") && !shown.contains("token\""),
            "{shown}"
        );
    }
}
