//! The gRPC edge's side of access control: the interceptor and the
//! admission of unary calls and streams, over the edge-neutral checks of
//! [`Access`] (which knows nothing of gRPC), with each refusal counted
//! under `grpc` and rendered as a gRPC status.

use tonic::{Request, Status};

use access::auth::API_KEY_METADATA;
use access::denial::Denial;
use access::keys::Principal;
use access::{Access, StreamGuard};

/// The gRPC status of a refusal: 401s are UNAUTHENTICATED, 403s
/// PERMISSION_DENIED, the rest (quota, rate, stream cap)
/// RESOURCE_EXHAUSTED; the message is the refusal's own.
pub fn status_of(denial: &Denial) -> Status {
    let message = denial.message();
    match denial.http_status() {
        401 => Status::unauthenticated(message),
        403 => Status::permission_denied(message),
        _ => Status::resource_exhausted(message),
    }
}

/// Access control as the gRPC edge applies it.
pub trait GrpcAccess {
    /// The interceptor: the key (lowercase `x-api-key` metadata) and the
    /// allow-list against the TCP peer; records the [`Principal`] in the
    /// request's extensions for [`GrpcAccess::grpc_unary`] and
    /// [`GrpcAccess::grpc_stream`].
    ///
    /// # Errors
    /// UNAUTHENTICATED or PERMISSION_DENIED.
    fn intercept(&self, request: Request<()>) -> Result<Request<()>, Status>;

    /// The quota and the rate for a unary call the interceptor admitted.
    ///
    /// # Errors
    /// RESOURCE_EXHAUSTED over the quota or the rate; UNAUTHENTICATED when
    /// the request did not pass the interceptor.
    fn grpc_unary<T>(&self, request: &Request<T>) -> Result<(), Status>;

    /// The quota and a stream slot for a stream the interceptor admitted;
    /// the guard must live as long as the response stream.
    ///
    /// # Errors
    /// RESOURCE_EXHAUSTED over the quota or at the stream cap;
    /// UNAUTHENTICATED when the request did not pass the interceptor.
    fn grpc_stream<T>(&self, request: &Request<T>) -> Result<StreamGuard, Status>;
}

impl GrpcAccess for Access {
    fn intercept(&self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let key = request
            .metadata()
            .get(API_KEY_METADATA)
            .and_then(|v| v.to_str().ok());
        let peer = request.remote_addr().map(|a| a.ip());
        match self.identify(key, peer) {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                Ok(request)
            }
            Err(denial) => Err(refused(self, &denial)),
        }
    }

    fn grpc_unary<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let principal = caller(request)?;
        self.charge_request(&principal)
            .inspect(|()| self.metrics().grpc_admission("ok"))
            .map_err(|denial| refused(self, &denial))
    }

    fn grpc_stream<T>(&self, request: &Request<T>) -> Result<StreamGuard, Status> {
        let principal = caller(request)?;
        let peer = request.remote_addr().map(|a| a.ip());
        self.admit_stream(&principal, peer)
            .inspect(|_| self.metrics().grpc_admission("ok"))
            .map_err(|denial| refused(self, &denial))
    }
}

/// Counts a refusal under `grpc` and renders it.
fn refused(access: &Access, denial: &Denial) -> Status {
    access.record_denial("grpc", denial);
    status_of(denial)
}

/// The caller the interceptor recorded.
fn caller<T>(request: &Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| {
            Status::unauthenticated("no authenticated caller: the access interceptor did not run")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use access::quota::{Period, QuotaKind};

    #[test]
    fn each_refusal_has_its_grpc_code_and_message() {
        let quota = Denial::QuotaExhausted {
            key_id: "k1".into(),
            kind: QuotaKind::Requests,
            period: Period::Day,
            limit: 10,
            resets_at_ms: 0,
            retry_after: std::time::Duration::from_secs(1),
        };
        let forbidden = Denial::Forbidden {
            key_id: "k1".into(),
            peer: None,
            url: None,
        };
        for (denial, code) in [
            (Denial::MissingKey, tonic::Code::Unauthenticated),
            (Denial::RejectedKey, tonic::Code::Unauthenticated),
            (quota, tonic::Code::ResourceExhausted),
            (forbidden, tonic::Code::PermissionDenied),
        ] {
            let status = status_of(&denial);
            assert_eq!(status.code(), code, "{denial:?}");
            assert_eq!(status.message(), denial.message());
            assert_eq!(
                denial.grpc_code(),
                match code {
                    tonic::Code::Unauthenticated => "unauthenticated",
                    tonic::Code::PermissionDenied => "permission_denied",
                    _ => "resource_exhausted",
                }
            );
        }
    }
}
