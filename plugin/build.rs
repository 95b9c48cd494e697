//! Restricts the cdylib's exported symbols to the plugin entry points (version script).
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir");
    println!("cargo:rerun-if-changed={dir}/exports.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exports.map");
}
