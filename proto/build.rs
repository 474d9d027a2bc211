//! Compiles the protobuf contract with protox (a pure-Rust compiler), so no
//! `protoc` is needed on any machine, and keeps the encoded descriptor set for
//! gRPC reflection.

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: [&str; 2] = [
    "venue_l1_gateway/v3/raw_feed.proto",
    "venue_l1_gateway/v3/market_streaming.proto",
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
        .compile_fds(descriptors)?;
    Ok(())
}
