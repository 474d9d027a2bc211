//! Every rejection of the raw feed service, each with a message naming its
//! cause, and authentication.

use std::time::Duration;

use proto::{FieldFilter, Filter, GetRequest, ListFeedsRequest, Position, StreamRequest, position};
use tonic::{Code, Request};

use super::harness::{TestServer, real, with_key};

fn zero(kind: position::Kind) -> Option<Position> {
    Some(Position { kind: Some(kind) })
}

fn one_filter(field: &str, values: &[&str]) -> Option<Filter> {
    Some(Filter {
        fields: vec![FieldFilter {
            field: field.to_owned(),
            op: 0,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }],
    })
}

#[tokio::test]
async fn invalid_arguments_name_their_cause() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let mut client = server.client().await;
    let cases: Vec<(&str, StreamRequest, &str)> = vec![
        (
            "zero block number",
            StreamRequest {
                position: zero(position::Kind::BlockNumber(0)),
                filter: None,
            },
            "position.block_number",
        ),
        (
            "zero timestamp",
            StreamRequest {
                position: zero(position::Kind::Timestamp(0)),
                filter: None,
            },
            "position.timestamp",
        ),
        (
            "negative block number",
            StreamRequest {
                position: zero(position::Kind::BlockNumber(-5)),
                filter: None,
            },
            "position.block_number",
        ),
        (
            "unadvertised field",
            StreamRequest {
                position: None,
                filter: one_filter("oids", &["1"]),
            },
            "oids",
        ),
        (
            "no values",
            StreamRequest {
                position: None,
                filter: one_filter("coins", &[]),
            },
            "coins",
        ),
    ];
    for (name, request, needle) in cases {
        let status = client
            .stream_fills(server.req(request.clone()))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{name}");
        assert!(
            status.message().contains(needle),
            "{name}: {}",
            status.message()
        );
        let get = GetRequest {
            position: request.position,
            filter: request.filter,
        };
        let status = client.get_fills(server.req(get)).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "get, {name}");
    }
    // A feed that advertises no filter fields rejects any filter.
    let status = client
        .stream_misc_events(server.req(StreamRequest {
            position: None,
            filter: one_filter("users", &["0xab"]),
        }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("users"), "{}", status.message());
    // Snapshots are positioned by time only.
    let status = client
        .stream_orderbook_snapshots(server.req(StreamRequest {
            position: zero(position::Kind::BlockNumber(985_148_181)),
            filter: None,
        }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("timestamp"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn missing_or_wrong_keys_are_unauthenticated() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let mut client = server.client().await;
    let status = client
        .list_feeds(Request::new(ListFeedsRequest {}))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(status.message().contains("x-api-key"));
    // The key with its last character changed (never to itself).
    let (stem, last) = server.key.split_at(server.key.len() - 1);
    let wrong = format!("{stem}{}", if last == "0" { "1" } else { "0" });
    let status = client
        .list_feeds(with_key(ListFeedsRequest {}, &wrong))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(
        !status.message().contains(&wrong),
        "the key is never echoed"
    );
    let status = client
        .stream_fills(with_key(StreamRequest::default(), "nope"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(
        client
            .list_feeds(server.req(ListFeedsRequest {}))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_revoked_key_stops_working_without_a_restart() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let mut client = server.client().await;
    assert!(
        client
            .list_feeds(server.req(ListFeedsRequest {}))
            .await
            .is_ok()
    );
    let mut file = access::keys::KeysFile::load(&server.keys_file).unwrap();
    let id = file.accounts[0].keys[0].id.clone();
    file.revoke(&id).unwrap();
    file.save(&server.keys_file).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client.list_feeds(server.req(ListFeedsRequest {})).await {
            Err(status) if status.code() == Code::Unauthenticated => break,
            _ if tokio::time::Instant::now() > deadline => panic!("revocation not picked up"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test]
async fn reflection_lists_the_services_with_a_key() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let channel = server.channel().await;
    let mut client = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let outbound = tokio_stream::iter(vec![request]);
    let mut responses = client
        .server_reflection_info(with_key(outbound, &server.key))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection response");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"venue_l1_gateway.v3.VenueL1Gateway".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_owned()),
        "{names:?}"
    );
}
