//! Per-sample stages of the DCPS data path, each on its own (`cargo bench -p
//! spindle-dds-core --bench stages`): a string-keyed instance's key hash, CDR encode and decode of an avionics type and of a
//! 1 KiB `Sequence`, a source timestamp (the participant's clock and the system's), the 64-byte sample header, a reader's cache (insert, then take), a
//! volatile store's push; and, as the reference in the same run, a 1 KiB memcpy. Throughput is per sample, so criterion's report reads as ns per
//! sample per stage.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use spindle_dds_core::cache::{Cache, Origin};
use spindle_dds_core::clock::{system_wall_ns, Clock, WallClock};
use spindle_dds_core::sample::{
    Coherent, SampleHeader, SampleKind, StateMask, SAMPLE_HEADER_BYTES,
};
use spindle_dds_core::store::Store;
use spindle_qos::{DeliveryLevel, History, ResourceLimits};
use spindle_topics::avionics::AirData;
use spindle_topics::builtin::KeyedString;
use spindle_topics::{Endianness, KeyHash, Sequence, TopicType};

/// Samples per batch in the cache and store stages.
const BATCH: u64 = 256;

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
        altitude_reference: Default::default(),
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

fn cdr<T: TopicType>(c: &mut Criterion, name: &str, value: T) {
    let mut g = c.benchmark_group(format!("cdr/{name}"));
    g.throughput(Throughput::Elements(1));
    let mut buf = vec![0u8; 64 * 1024];
    g.bench_function("encode_into", |b| {
        b.iter(|| black_box(&value).encode_into(Endianness::Little, &mut buf))
    });
    let bytes = value.encode(Endianness::Little).expect("encodes");
    g.bench_function("decode", |b| b.iter(|| T::decode(black_box(&bytes))));
    g.finish();
}

/// The instance of each write of a string-keyed topic: a writer cycling through 8
/// instances of `DDS::KeyedString`, whose unbounded key is digested (MD5).
fn key_hash(c: &mut Criterion) {
    let mut g = c.benchmark_group("key_hash");
    g.throughput(Throughput::Elements(1));
    let values: Vec<KeyedString> = (0..8)
        .map(|k| KeyedString {
            key: format!("k{k}"),
            value: String::new(),
        })
        .collect();
    let mut i = 0usize;
    g.bench_function("KeyedString_8_instances", |b| {
        b.iter(|| {
            i = (i + 1) % values.len();
            black_box(&values[i]).key_hash()
        })
    });
    g.finish();
}

fn stages(c: &mut Criterion) {
    key_hash(c);
    // The reference, in the same run: copying 1 KiB.
    let mut g = c.benchmark_group("reference");
    g.throughput(Throughput::Elements(1));
    let src = vec![0x5Au8; 1024];
    let mut dst = vec![0u8; 1024];
    g.bench_function("memcpy_1KiB", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)))
    });
    g.finish();

    cdr(c, "AirData", air_data());
    cdr(
        c,
        "Sequence1KiB",
        Sequence {
            payload: vec![0xA5; 1024 - 8],
        },
    );

    // A source timestamp: the participant's clock against the system's wall clock.
    let mut g = c.benchmark_group("source_timestamp");
    g.throughput(Throughput::Elements(1));
    g.bench_function("WallClock", |b| b.iter(|| black_box(WallClock.wall_ns())));
    g.bench_function("SystemTime", |b| b.iter(|| black_box(system_wall_ns())));
    g.finish();

    let mut g = c.benchmark_group("header");
    g.throughput(Throughput::Elements(1));
    let mut out = [0u8; SAMPLE_HEADER_BYTES];
    g.bench_function("encode", |b| {
        b.iter(|| black_box(header(black_box(7))).encode(black_box(&mut out)))
    });
    let mut msg = out.to_vec();
    msg.extend_from_slice(&[0; 1024]);
    g.bench_function("decode", |b| {
        b.iter(|| SampleHeader::decode(black_box(&msg)))
    });
    g.finish();

    let payload = vec![0xA5u8; 1024];
    let origin = |i: u64| Origin {
        node: 1,
        view_id: 1,
        order_index: i,
    };
    let mut g = c.benchmark_group("cache");
    g.throughput(Throughput::Elements(BATCH));
    g.bench_function("insert_then_take_1KiB", |b| {
        b.iter_batched(
            || Cache::new(History::keep_all(), ResourceLimits::default()),
            |mut cache| {
                for i in 0..BATCH {
                    let _ = cache.insert(&header(i), &payload, origin(i));
                }
                black_box(cache.access(usize::MAX, &StateMask::ANY, None, true))
            },
            BatchSize::SmallInput,
        )
    });
    // As a reader runs it: one cache for the whole run, the taken bytes given back.
    let mut cache = Cache::new(History::keep_all(), ResourceLimits::default());
    let mut seq = 0;
    g.bench_function("insert_then_take_recycled_1KiB", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                seq += 1;
                let _ = cache.insert(&header(seq), &payload, origin(seq));
            }
            let taken = cache.access(usize::MAX, &StateMask::ANY, None, true);
            cache.recycle(taken.into_iter().map(|(_, bytes)| bytes));
        })
    });
    g.finish();

    let mut g = c.benchmark_group("store");
    g.throughput(Throughput::Elements(BATCH));
    let mut msg = [0u8; SAMPLE_HEADER_BYTES].to_vec();
    msg.extend_from_slice(&payload);
    g.bench_function("push_1KiB_keep_last_1", |b| {
        b.iter_batched(
            Store::default,
            |mut store| {
                for i in 0..BATCH {
                    store.push(&header(i), origin(i), &msg, 1);
                }
                black_box(store)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
