//! `grpc.health.v1.Health` with the strict codec: the statuses are tonic's
//! health reporter's (set by the server as its data freshens and stales),
//! and bytes that are not a request are `INVALID_ARGUMENT`, as on every
//! other service (tonic's own health server answers them `INTERNAL`).

use std::pin::Pin;

use futures_util::{Stream, StreamExt as _};
use proto::health::health_server::{Health, HealthServer};
use proto::health::{HealthCheckRequest, HealthCheckResponse};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_server::Health as _;
use tonic_health::server::{HealthReporter, HealthService};

/// The health service over `reporter`'s statuses.
pub fn server(reporter: HealthReporter) -> HealthServer<StrictHealth> {
    HealthServer::new(StrictHealth {
        inner: HealthService::from_health_reporter(reporter),
    })
}

/// Answers from tonic's health service, decoding strictly.
#[derive(Debug)]
pub struct StrictHealth {
    inner: HealthService,
}

/// The request as tonic's health service takes it.
fn inner_request(
    request: Request<HealthCheckRequest>,
) -> Request<tonic_health::pb::HealthCheckRequest> {
    Request::new(tonic_health::pb::HealthCheckRequest {
        service: request.into_inner().service,
    })
}

fn answer(response: tonic_health::pb::HealthCheckResponse) -> HealthCheckResponse {
    HealthCheckResponse {
        status: response.status,
    }
}

#[tonic::async_trait]
impl Health for StrictHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let response = self.inner.check(inner_request(request)).await?;
        Ok(Response::new(answer(response.into_inner())))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let statuses = self.inner.watch(inner_request(request)).await?.into_inner();
        Ok(Response::new(Box::pin(
            statuses.map(|status| status.map(answer)),
        )))
    }
}
