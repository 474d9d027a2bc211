//! The command line of `l1gate archive fetch`, the datasets and buckets it
//! knows, and the one error type of the feature.

use std::path::PathBuf;

use thiserror::Error;

use super::dataset::Dataset;
use super::{credentials, hours, s3};

/// The bucket `archive fetch` reads unless told otherwise.
pub const DEFAULT_BUCKET: &str = "hl-mainnet-node-data";

/// The buckets whose region is known, so no `--region` is needed for them.
pub const KNOWN_BUCKETS: [(&str, &str); 2] = [
    ("hl-mainnet-node-data", "ap-northeast-1"),
    ("hyperliquid-archive", "us-east-1"),
];

/// The region of a known bucket.
pub fn known_region(bucket: &str) -> Option<&'static str> {
    KNOWN_BUCKETS
        .iter()
        .find(|(name, _)| *name == bucket)
        .map(|(_, region)| *region)
}

/// `l1gate archive`.
#[derive(Debug, clap::Args)]
pub struct ArchiveCommand {
    /// What to do.
    #[command(subcommand)]
    pub action: ArchiveAction,
}

/// `l1gate archive …`.
#[derive(Debug, clap::Subcommand)]
pub enum ArchiveAction {
    /// Download hour files of the exchange's public S3 archive (requester
    /// pays: your AWS account is billed for the transfer) into DIR, in the
    /// bucket's own layout, `DIR/<dataset>/hourly/YYYYMMDD/H.lz4`. Besides
    /// the hours of [--from, --to), the hour before --from and the hour
    /// after the last one are fetched too: a file is cut on the writing
    /// node's clock, so blocks of the range spill over into them. Prints the
    /// plan (files, bytes, hours the bucket lacks) before downloading;
    /// complete files are skipped, `.part` files resumed. Needs AWS keys:
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in
    /// ~/.aws/credentials or ~/.aws/config.
    Fetch(FetchArgs),
}

/// `l1gate archive fetch`.
#[derive(Debug, Clone, clap::Args)]
pub struct FetchArgs {
    /// The dataset.
    #[arg(long, value_enum, default_value_t = Dataset::NodeFillsByBlock)]
    pub dataset: Dataset,

    /// First hour wanted, ISO-8601 UTC (`2025-07-27T08:00:00Z`) or a date
    /// (`2025-07-27`, midnight); a time inside an hour takes that whole
    /// hour. The hour before it is fetched too (spill-over).
    #[arg(long, value_name = "TIME", value_parser = hours::parse_time)]
    pub from: i64,

    /// End of the range, excluded, in the same forms; a time inside an hour
    /// takes that whole hour. The hour after the last one is fetched too
    /// (spill-over).
    #[arg(long, value_name = "TIME", value_parser = hours::parse_time)]
    pub to: i64,

    /// Directory the files go to, as `DIR/<dataset>/hourly/YYYYMMDD/H.lz4`.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// The bucket.
    #[arg(long, value_name = "BUCKET", default_value = DEFAULT_BUCKET)]
    pub bucket: String,

    /// The bucket's region. Default: AWS_REGION, else AWS_DEFAULT_REGION,
    /// else the known region of the bucket (hl-mainnet-node-data:
    /// ap-northeast-1, hyperliquid-archive: us-east-1), else the profile's
    /// `region` in the AWS config file.
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,

    /// An S3-compatible server instead of AWS (`http://HOST:PORT` or
    /// `https://HOST:PORT`), addressed path-style (`URL/BUCKET/KEY`).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,

    /// The AWS profile of the shared credentials and config files (default:
    /// AWS_PROFILE, else `default`); when given, it wins over AWS_ACCESS_KEY_ID
    /// and AWS_SECRET_ACCESS_KEY.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Transfers at once.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,

    /// Print the plan (files, bytes, missing hours) and stop; writes nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Why `l1gate archive` failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// `--to` not after `--from`.
    #[error("--to {to} is not after --from {from}: the range [from, to) holds no hour")]
    EmptyRange {
        /// `--from` as ISO-8601.
        from: String,
        /// `--to` as ISO-8601.
        to: String,
    },
    /// A bucket of unknown region and no region given anywhere.
    #[error(
        "bucket {bucket}: its region is not known to l1gate; pass --region (or set AWS_REGION)"
    )]
    UnknownRegion {
        /// The bucket.
        bucket: String,
    },
    /// A `--endpoint` that is not an `http(s)://host[:port]` URL.
    #[error("--endpoint {endpoint:?}: {why}")]
    Endpoint {
        /// The value given.
        endpoint: String,
        /// What is wrong with it.
        why: String,
    },
    /// No usable credentials.
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialsError),
    /// A request to the bucket failed.
    #[error(transparent)]
    S3(#[from] s3::S3Error),
    /// A local file or directory could not be read or written.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// An object whose size is not the listed one any more.
    #[error(
        "s3://{bucket}/{key}: changed since it was listed ({now} bytes now, {listed} listed); run \
         again to plan it anew"
    )]
    Changed {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// The size listed.
        listed: u64,
        /// The size the GET answered with.
        now: u64,
    },
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(String),
    /// Some hour files were not fetched (each was reported as it failed).
    #[error(
        "{failed} of {total} hour files of s3://{bucket}/{dataset} failed; run the same command again to resume"
    )]
    Incomplete {
        /// The bucket.
        bucket: String,
        /// The dataset.
        dataset: String,
        /// Files that failed.
        failed: usize,
        /// Files the run tried.
        total: usize,
    },
}

impl ArchiveError {
    /// A local file error naming `path`.
    pub fn file(path: impl Into<PathBuf>, error: &std::io::Error) -> Self {
        Self::File {
            path: path.into(),
            message: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_buckets_have_their_regions() {
        assert_eq!(known_region("hl-mainnet-node-data"), Some("ap-northeast-1"));
        assert_eq!(known_region("hyperliquid-archive"), Some("us-east-1"));
        assert_eq!(known_region("somebody-elses-bucket"), None);
    }

    #[test]
    fn dataset_names_are_the_bucket_folders() {
        use clap::ValueEnum as _;
        let names: Vec<String> = Dataset::value_variants()
            .iter()
            .map(|d| {
                let shown = d.to_possible_value().map(|v| v.get_name().to_owned());
                assert_eq!(shown.as_deref(), Some(d.as_str()));
                d.to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "node_fills_by_block",
                "node_fills",
                "node_trades",
                "misc_events_by_block"
            ]
        );
    }
}
