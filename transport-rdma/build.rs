//! Build script: only does anything under the `libfabric` feature, where it generates the
//! libfabric bindings with bindgen from the system headers (libfabric-dev, 1.17+) and
//! compiles the C shim that turns libfabric's static-inline calls into real symbols.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_LIBFABRIC").is_some() {
        #[cfg(feature = "libfabric")]
        libfabric::build();
    }
}

#[cfg(feature = "libfabric")]
mod libfabric {
    use std::path::PathBuf;

    pub fn build() {
        println!("cargo:rerun-if-changed=csrc/fi_shim.c");
        println!("cargo:rerun-if-changed=csrc/fi_shim.h");
        println!("cargo:rerun-if-env-changed=LIBFABRIC_INCLUDE_DIR");
        println!("cargo:rerun-if-env-changed=LIBFABRIC_LIB_DIR");

        let include_dir = std::env::var("LIBFABRIC_INCLUDE_DIR").ok();
        if let Ok(lib_dir) = std::env::var("LIBFABRIC_LIB_DIR") {
            println!("cargo:rustc-link-search=native={lib_dir}");
        }

        let mut shim = cc::Build::new();
        shim.file("csrc/fi_shim.c").warnings(true);
        if let Some(dir) = &include_dir {
            shim.include(dir);
        }
        shim.compile("spindle_fi_shim");
        // The shim calls into libfabric, so libfabric comes after it on the link line.
        println!("cargo:rustc-link-lib=dylib=fabric");

        let mut builder = bindgen::Builder::default()
            .header("csrc/fi_shim.h")
            .allowlist_function("fi_getinfo|fi_freeinfo|fi_dupinfo|fi_strerror|fi_version")
            .allowlist_function("spindle_fi_.*")
            .allowlist_type("fi_.*")
            .allowlist_var("FI_.*")
            .derive_default(true)
            .layout_tests(false)
            .generate_comments(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        if let Some(dir) = &include_dir {
            builder = builder.clang_arg(format!("-I{dir}"));
        }
        let bindings = builder.generate().unwrap_or_else(|err| {
            panic!(
                "bindgen could not read the libfabric headers ({err}); install libfabric-dev \
                 1.17+ and libclang-dev (scripts/setup-rdma.sh) or set LIBFABRIC_INCLUDE_DIR"
            )
        });
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        bindings
            .write_to_file(out.join("fi_bindings.rs"))
            .expect("OUT_DIR is writable");
    }
}
