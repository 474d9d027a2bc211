//! Compiles the protobuf contract with protox (a pure-Rust compiler), so no
//! `protoc` is needed on any machine, and keeps the encoded descriptor set for
//! gRPC reflection.

use std::fmt::Write as _;
use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: [&str; 4] = [
    "venue_l1_gateway/v3/raw_feed.proto",
    "venue_l1_gateway/v3/market_streaming.proto",
    "aptos/indexer/v1/raw_data.proto",
    "grpc/health/v1/health.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed=proto/{proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("l1gate_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // Records and L4 diff payloads are served straight from memory maps
        // and shared buffers: `Bytes` lets them go out without a copy.
        .bytes(".venue_l1_gateway.v3.Record.data")
        .bytes(".venue_l1_gateway.v3.L4BookDiff.data")
        // The Transaction Stream is relayed: its opaque transactions and
        // filter pass through as shared buffers.
        .bytes(".aptos.indexer.v1")
        // Undecodable messages are INVALID_ARGUMENT, not INTERNAL.
        .codec_path("crate::codec::StrictCodec")
        .compile_fds(descriptors.clone())?;
    encoded_market_server(&descriptors, &out_dir)?;
    Ok(())
}

/// Generates a second server for `MarketStreaming` whose responses are
/// [`Encoded`](../src/encoded.rs) frames: protobuf bytes prepared once and
/// shared by every subscriber, written to the wire by a pass-through codec.
/// The methods are read from the descriptor set, so the `.proto` file stays
/// the only list of RPCs. Clients keep using the ordinary generated client:
/// the bytes on the wire are the same messages.
fn encoded_market_server(
    descriptors: &prost_types::FileDescriptorSet,
    out_dir: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let service = descriptors
        .file
        .iter()
        .flat_map(|file| file.service.iter())
        .find(|service| service.name() == "MarketStreaming")
        .ok_or("MarketStreaming service missing from the descriptor set")?;
    let mut listed = String::new();
    let mut builder = tonic_build::manual::Service::builder()
        .name("MarketStreaming")
        .package("venue_l1_gateway.v3");
    for method in &service.method {
        let input = method
            .input_type()
            .strip_prefix(".venue_l1_gateway.v3.")
            .ok_or("MarketStreaming input outside venue_l1_gateway.v3")?;
        let stream = format!("{}Stream", method.name());
        writeln!(
            listed,
            "            {}($crate::v3::{input}) => {stream},",
            snake_case(method.name())
        )?;
        builder = builder.method(
            tonic_build::manual::Method::builder()
                .name(snake_case(method.name()))
                .route_name(method.name())
                .input_type(format!("crate::v3::{input}"))
                .output_type("crate::encoded::Encoded")
                .codec_path("crate::encoded::EncodedCodec")
                .server_streaming()
                .build(),
        );
    }
    let dir = out_dir.join("encoded");
    fs::create_dir_all(&dir)?;
    tonic_build::manual::Builder::new()
        .build_client(false)
        .out_dir(&dir)
        .compile(&[builder.build()]);
    fs::write(
        dir.join("market_streaming_methods.rs"),
        format!(
            "/// Calls `$callback! {{ method(Request) => StreamType, … }}` with every\n\
             /// `MarketStreaming` method of the `.proto`, so a service can be\n\
             /// written once for all of them.\n\
             #[macro_export]\n\
             macro_rules! for_each_market_method {{\n    \
                 ($callback:ident) => {{\n        $callback! {{\n{listed}        }}\n    }};\n}}\n"
        ),
    )?;
    Ok(())
}

/// `StreamL2Book` → `stream_l2_book`, the way the prost generator names
/// methods.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut previous: Option<char> = None;
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            if previous.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit()) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
        previous = Some(c);
    }
    out
}
