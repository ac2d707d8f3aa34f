//! Nothing to generate. This script exists so that its build-dependency,
//! protoc-bin-vendored, is downloaded for every build of this crate: the
//! workspace's scripts/protoc falls back to that binary when the machine has
//! no protoc for etcd-client's build script (see .cargo/config.toml).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
