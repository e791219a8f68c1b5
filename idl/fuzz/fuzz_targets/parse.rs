//! Fuzz target: the preprocessor, parser and code generator never panic on any input.
//!
//! `cd idl/fuzz && cargo +nightly fuzz run parse -- -max_total_time=60`
//! (seed the corpus with `../tests/corpus/valid/*.idl`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        if let Err(e) = spindle_idl::generate("fuzz.idl", src, &[] as &[&str]) {
            // Every failure is a rendered diagnostic, not a panic.
            let _ = e.to_string();
        }
    }
});
