//! What a content filter costs a reader (`cargo bench -p spindle-dds-core --bench filter`),
//! per sample of the avionics `AirData`, with the unfiltered reader's path as the
//! reference in the same run:
//!
//! * `reader/unfiltered`: what a reader does per sample without a filter — insert into
//!   its cache, take, decode into the typed value, give the bytes back;
//! * `reader/filtered_all_pass`: the same behind a filter every sample passes (a nested
//!   comparison and an enum by name), so the filter's whole cost shows: the sample is
//!   decoded into member values and the expression evaluated, then kept as above;
//! * `filter/decode_json` and `filter/evaluate`: the two halves of that cost; and
//!   `filter/typed_decode`, the typed decode the reader does anyway, for scale.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use serde_json::Value;
use spindle_dds_core::cache::{Cache, Origin};
use spindle_dds_core::content_filter::ContentFilter;
use spindle_dds_core::filter::Filter;
use spindle_dds_core::sample::{Coherent, SampleHeader, SampleKind, StateMask};
use spindle_dynamic::DynType;
use spindle_qos::{DeliveryLevel, History, ResourceLimits};
use spindle_topics::avionics::{AirData, AltitudeReference};
use spindle_topics::{Endianness, KeyHash, TopicType};

/// Samples per iteration of the reader stages.
const BATCH: u64 = 256;
/// The expression: every sample below passes it.
const EXPRESSION: &str =
    "pressure_altitude_m > %0 AND altitude_reference = 'BAROMETRIC' AND mach BETWEEN 0.1 AND 0.9";

fn air_data() -> AirData {
    AirData {
        aircraft_id: 0xA1,
        timestamp_ns: 1_700_000_000_000_000_000,
        indicated_airspeed_mps: 120.0,
        true_airspeed_mps: 130.0,
        mach: 0.4,
        pressure_altitude_m: 3000.0,
        vertical_speed_mps: 0.0,
        static_air_temperature_k: 268.0,
        altitude_reference: AltitudeReference::Barometric,
    }
}

fn header(seq: u64) -> SampleHeader {
    SampleHeader {
        kind: SampleKind::Data,
        writer_id: 1,
        topic_id: 42,
        writer_seq: seq,
        source_timestamp_ns: 0,
        key_hash: KeyHash([(seq % 8) as u8; 16]),
        lifespan_ns: 0,
        ownership_strength: 0,
        partition_tag: 0,
        coherent: Coherent::No,
        level: DeliveryLevel::Atomic,
    }
}

fn origin(i: u64) -> Origin {
    Origin {
        node: 1,
        view_id: 1,
        order_index: i,
    }
}

/// One reader iteration: `BATCH` samples inserted (those `keep` passes), taken, decoded.
fn reader_pass(cache: &mut Cache, seq: &mut u64, bytes: &[u8], keep: &dyn Fn(&[u8]) -> bool) {
    for _ in 0..BATCH {
        *seq += 1;
        if keep(bytes) {
            let _ = cache.insert(&header(*seq), bytes, origin(*seq));
        }
    }
    let taken = cache.access(usize::MAX, &StateMask::ANY, None, true);
    for (_, b) in &taken {
        black_box(AirData::decode(b.bytes()).expect("decodes"));
    }
    cache.recycle(taken.into_iter().map(|(_, b)| b));
}

fn filter(c: &mut Criterion) {
    let params = ["1000".to_string()];
    let bytes = air_data().encode(Endianness::Little).expect("encodes");
    let cf = ContentFilter::of_type::<AirData>(EXPRESSION, &params).expect("filter");
    assert!(cf.passes(&bytes), "the bench's sample passes");

    let mut g = c.benchmark_group("reader");
    g.throughput(Throughput::Elements(BATCH));
    let mut cache = Cache::new(History::keep_all(), ResourceLimits::default());
    let mut seq = 0;
    g.bench_function("unfiltered", |b| {
        b.iter(|| reader_pass(&mut cache, &mut seq, &bytes, &|_| true))
    });
    g.bench_function("filtered_all_pass", |b| {
        b.iter(|| reader_pass(&mut cache, &mut seq, &bytes, &|x| cf.passes(x)))
    });
    g.finish();

    let ty = DynType::from_idl_source(
        "avionics",
        AirData::IDL_SOURCE.expect("generated"),
        AirData::TYPE_NAME,
    )
    .expect("type");
    let f = Filter::new(EXPRESSION, &params).expect("filter");
    let value: Value = ty.decode_json(&bytes).expect("decodes");
    let mut g = c.benchmark_group("filter");
    g.throughput(Throughput::Elements(1));
    g.bench_function("typed_decode", |b| {
        b.iter(|| AirData::decode(black_box(&bytes)))
    });
    g.bench_function("decode_json", |b| {
        b.iter(|| ty.decode_json(black_box(&bytes)))
    });
    g.bench_function("evaluate", |b| b.iter(|| f.matches(black_box(&value))));
    g.finish();
}

criterion_group!(benches, filter);
criterion_main!(benches);
