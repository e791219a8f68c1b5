//! Fuzzes what a DDS message from a peer starts with: the sample header, and the
//! built-in discovery and declaration messages read through it. Any bytes decode or are
//! refused with an error, never a panic.
//!
//! ```text
//! cd dds-core/fuzz && cargo +nightly fuzz run sample_header -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_dds_core::sample::{SampleHeader, SAMPLE_HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok((_, payload)) = SampleHeader::decode(data) {
        assert_eq!(payload.len() + SAMPLE_HEADER_BYTES, data.len());
    }
    let _ = spindle_dds_core::discovery::decode(data);
    let _ = spindle_dds_core::declare::decode_declaration(data);
});
