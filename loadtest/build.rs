//! Generates the gRPC client of the data API from the service's checked-in `.proto`
//! (protox: no `protoc` needed), for `netbench`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../services/strata/proto");
    let files = protox::compile(["strata/v1/data.proto"], ["../services/strata/proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(files)?;
    Ok(())
}
