//! StreamAllMids and StreamActiveAssetCtx end to end: from a stand-in Info
//! server that the tests change, stop and restart, and (without one) from
//! the books.

use std::time::{Duration, Instant};

use engine::coin;
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use tonic::Code;
use tonic::transport::Channel;

use super::harness::{TestServer, next, nothing_within, real};
use super::market_live::live_node;
use super::standin::{StandIn, ctx, info_router, info_world};

const WAIT: Duration = Duration::from_secs(10);
/// Longer than several poll intervals: a change would have shown by then.
const QUIET: Duration = Duration::from_millis(1_200);

async fn client(server: &TestServer) -> MarketStreamingClient<Channel> {
    let channel = server.channel().await;
    MarketStreamingClient::new(channel)
}

async fn with_source(source: &StandIn) -> TestServer {
    TestServer::start(&real("btc-985148182"), |args| {
        args.info_url = Some(source.url("/info"));
        args.info_poll_interval_ms = Some(100);
        args.upstream_timeout_ms = Some(1_000);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_mids_follow_the_source_perps_only_and_an_outage_is_silence() {
    let world = info_world();
    let mut source = StandIn::start(info_router(world.clone())).await;
    let server = with_source(&source).await;
    let mut client = client(&server).await;

    let before = common::unix_now_ms();
    let asked = Instant::now();
    let mut stream = client
        .stream_all_mids(server.req(pb::AllMidsRequest {}))
        .await
        .unwrap()
        .into_inner();
    let opening = next(&mut stream, WAIT).await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    let mut keys: Vec<&str> = opening.mids.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["BTC", "ETH"],
        "spot, builder and outcome keys are left out"
    );
    assert_eq!(opening.mids["BTC"], "81001.5");
    assert!(opening.time >= before && opening.time <= common::unix_now_ms());

    // A perp mid changes: a new full map.
    world.lock().mids.insert("BTC".into(), "81010.0".into());
    let update = next(&mut stream, WAIT).await.unwrap();
    assert_eq!(update.mids["BTC"], "81010.0");
    assert_eq!(update.mids["ETH"], "3050.25");
    assert!(update.time >= opening.time);

    // Only non-perp mids change: nothing to send.
    world.lock().mids.insert("@107".into(), "39.0".into());
    world.lock().mids.insert("xyz:NVDA".into(), "125.0".into());
    nothing_within(&mut stream, QUIET).await;

    // The source goes away: no frames and no close, even past the timeout.
    source.stop().await;
    world.lock().mids.insert("ETH".into(), "3060.0".into());
    let polls = world.lock().asked("allMids");
    nothing_within(&mut stream, Duration::from_millis(2_500)).await;
    assert_eq!(world.lock().asked("allMids"), polls, "the source was down");

    // It comes back: the change made meanwhile arrives.
    source.restart().await;
    let recovered = next(&mut stream, WAIT).await.unwrap();
    assert_eq!(recovered.mids["ETH"], "3060.0");
    assert_eq!(recovered.mids.len(), 2);

    // A second subscriber gets the current map at once.
    let mut late = client
        .stream_all_mids(server.req(pb::AllMidsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut late, WAIT).await.unwrap().mids, recovered.mids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_asset_ctx_opens_with_the_context_and_sends_its_changes() {
    let world = info_world();
    let source = StandIn::start(info_router(world.clone())).await;
    let server = with_source(&source).await;
    let mut client = client(&server).await;

    let mut stream = client
        .stream_active_asset_ctx(server.req(pb::ActiveAssetCtxRequest { coin: "BTC".into() }))
        .await
        .unwrap()
        .into_inner();
    let opening = next(&mut stream, WAIT).await.unwrap();
    assert_eq!(opening.coin, "BTC");
    let ctx_now = opening.ctx.unwrap();
    assert_eq!(ctx_now.mark_px, "81000.0");
    assert_eq!(ctx_now.funding, "0.0000125");
    assert_eq!(ctx_now.premium.as_deref(), Some("0.0001"));
    assert_eq!(ctx_now.mid_px, None);
    assert_eq!(ctx_now.impact_pxs, ["80999.0", "81002.0"]);
    assert_eq!(ctx_now.day_base_vlm, "15.2");

    // Another coin's context changes: nothing for BTC.
    world.lock().ctxs[1].1 = ctx("3100.0");
    nothing_within(&mut stream, QUIET).await;

    world.lock().ctxs[0].1 = ctx("81500.0");
    let update = next(&mut stream, WAIT).await.unwrap();
    assert_eq!(update.ctx.unwrap().mark_px, "81500.0");
    assert!(update.time >= opening.time);

    for (coin, message) in [
        ("NOPE", "coin: unknown coin \"NOPE\""),
        ("@107", "coin: \"@107\" is not a perp"),
        ("xyz:NVDA", "coin: \"xyz:NVDA\" is not a perp"),
        ("", "coin: required"),
        ("  ", "coin: required"),
    ] {
        let status = client
            .stream_active_asset_ctx(server.req(pb::ActiveAssetCtxRequest { coin: coin.into() }))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{coin}: {status:?}");
        assert!(status.message().contains(message), "{coin}: {status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_source_mids_come_from_the_books_perps_only_and_contexts_are_refused() {
    let node = live_node(400, 40, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    for _ in 0..600 {
        if server.running.engine.status().ready() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = client(&server).await;

    let status = client
        .stream_active_asset_ctx(server.req(pb::ActiveAssetCtxRequest { coin: "BTC".into() }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("Info source"), "{status:?}");

    // The books have spot and builder coins too.
    let coins = server.running.engine.status().coins();
    assert!(coins.iter().any(|c| !coin::is_default_perp(c)), "{coins:?}");

    let mut stream = client
        .stream_all_mids(server.req(pb::AllMidsRequest {}))
        .await
        .unwrap()
        .into_inner();
    let mut last: Option<pb::AllMidsUpdate> = None;
    for _ in 0..5 {
        let frame = next(&mut stream, Duration::from_secs(30)).await.unwrap();
        assert!(!frame.mids.is_empty());
        for coin in frame.mids.keys() {
            assert!(coin::is_default_perp(coin), "{coin} in {:?}", frame.mids);
            assert!(server.running.engine.status().coins().contains(coin));
        }
        if let Some(previous) = &last {
            assert_ne!(previous.mids, frame.mids, "a frame without a perp change");
        }
        last = Some(frame);
    }
}
