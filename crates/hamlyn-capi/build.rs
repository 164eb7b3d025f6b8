//! Gives the shared library the soname it is installed under (install.sh): C programs
//! linked with `-lhamlyn` then record `libhamlyn.so.0` and find it at run time.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhamlyn.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
