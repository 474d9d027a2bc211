//! `l1gate archive`: the exchange's public, requester-pays S3 archive of node
//! output (docs/replay-and-simulate.md, "Fetching the public archive").
//!
//! The parts:
//!
//! - [`command`]: the command line of `l1gate archive fetch`, the datasets
//!   and buckets it knows, and the one error type of the feature;
//! - [`hours`]: times, the hour range with its spill-over hours, and the
//!   bucket's key of an hour (`<dataset>/hourly/YYYYMMDD/H.lz4`, the hour
//!   not zero-padded);
//! - [`dataset`]: the bucket folders it reads;
//! - [`credentials`]: AWS credentials and a profile's region from the
//!   standard places, in the standard order;
//! - [`sigv4`]: AWS Signature Version 4, sans-I/O;
//! - [`s3`]: the S3 client (plain TCP or TLS, one HTTP/1.1 connection per
//!   request, every request signed and carrying `x-amz-request-payer:
//!   requester`), ListObjectsV2 and its XML, S3's error answers;
//! - [`fetch`]: the plan (what the bucket has, what is already here, the
//!   gaps), the resumable downloads through `.part` files, progress and the
//!   summary.
//!
//! Nothing here is on the server's path: `l1gate serve` never reaches S3.

pub mod command;
pub mod credentials;
pub mod dataset;
pub mod fetch;
pub mod hours;
pub mod s3;
pub mod sigv4;

pub use command::{
    ArchiveAction, ArchiveCommand, ArchiveError, DEFAULT_BUCKET, FetchArgs, KNOWN_BUCKETS,
    known_region,
};
pub use dataset::Dataset;

/// Runs `l1gate archive …`, with the process's environment.
///
/// # Errors
/// [`ArchiveError`]: bad arguments, no credentials, a request refused, a
/// file that could not be written, or hour files that failed.
pub fn run(command: ArchiveCommand) -> Result<(), ArchiveError> {
    let env = |name: &str| std::env::var(name).ok();
    match command.action {
        ArchiveAction::Fetch(args) => fetch::run(&args, &env),
    }
}
