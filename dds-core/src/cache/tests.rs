//! The cache's unit tests.

use super::*;
use spindle_topics::KeyHash;

fn hdr(kind: SampleKind, key: u8, seq: u64) -> SampleHeader {
    SampleHeader {
        kind,
        writer_id: 1,
        topic_id: 9,
        writer_seq: seq,
        source_timestamp_ns: 0,
        key_hash: KeyHash([key; 16]),
        lifespan_ns: 0,
        ownership_strength: 0,
        partition_tag: 0,
        coherent: Coherent::No,
        level: spindle_qos::DeliveryLevel::VolatileStore,
    }
}
fn o(i: u64) -> Origin {
    Origin {
        node: 1,
        view_id: 1,
        order_index: i,
    }
}

#[test]
fn spare_buffers_are_reused_and_bounded() {
    let mut c = Cache::new(History::keep_all(), ResourceLimits::default());
    c.recycle((0..10_000).map(|_| Payload::Owned(vec![0u8; 1024])));
    assert!(
        c.spare_bytes <= SPARE_BYTES_MAX,
        "bounded: {}",
        c.spare_bytes
    );
    assert_eq!(c.spare.len(), SPARE_BYTES_MAX / 1024);
    let before = c.spare.len();
    c.insert(&hdr(SampleKind::Data, 1, 1), b"abc", o(0))
        .unwrap();
    assert_eq!(
        c.spare.len(),
        before - 1,
        "the sample's copy took a spare buffer"
    );
    let got = c.access(10, &StateMask::ANY, None, true);
    assert_eq!(got[0].1.bytes(), b"abc", "and holds exactly the payload");
    c.recycle(got.into_iter().map(|(_, b)| b));
    assert_eq!(c.spare.len(), before);
}

#[test]
fn evictions_in_the_middle_leave_bounded_holes_and_the_order() {
    // Instance 1's one sample stays at the front while instance 2 (KEEP_LAST 1) is
    // replaced 1,000 times behind it: each eviction leaves a hole in the middle.
    let mut c = Cache::new(History::keep_last(1), ResourceLimits::default());
    c.insert(&hdr(SampleKind::Data, 1, 0), b"first", o(0))
        .unwrap();
    for i in 1..=1000u64 {
        c.insert(&hdr(SampleKind::Data, 2, i), b"x", o(i)).unwrap();
        assert_eq!(c.len(), 2);
        assert!(
            c.samples.slots.len() <= 2 * c.len() + SAMPLE_HOLES_SLACK,
            "holes bounded after {i} evictions: {} slots",
            c.samples.slots.len()
        );
    }
    let seqs: Vec<u64> = c
        .access(10, &StateMask::ANY, None, false)
        .iter()
        .map(|s| s.0.writer_seq)
        .collect();
    assert_eq!(
        seqs,
        vec![0, 1000],
        "arrival order, the newest of instance 2"
    );
    // Take one instance (a removal at the front), then the rest.
    let one = c.access(
        10,
        &StateMask::ANY,
        Some(InstanceHandle(KeyHash([1; 16]))),
        true,
    );
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].1.bytes(), b"first");
    assert_eq!(c.len(), 1);
    let rest = c.access(10, &StateMask::ANY, None, true);
    assert_eq!(rest[0].0.writer_seq, 1000);
    assert!(c.is_empty() && c.samples.slots.is_empty());
}

#[test]
fn keep_last_keeps_the_newest_per_instance() {
    let mut c = Cache::new(History::keep_last(2), ResourceLimits::default());
    for i in 0..5 {
        c.insert(&hdr(SampleKind::Data, (i % 2) as u8, i), b"x", o(i))
            .unwrap();
    }
    let got: Vec<u64> = c
        .access(100, &StateMask::ANY, None, true)
        .iter()
        .map(|s| s.0.writer_seq)
        .collect();
    assert_eq!(got, vec![1, 2, 3, 4]);
    assert!(c.is_empty());
}

#[test]
fn keep_all_rejects_past_the_limits_and_read_marks_samples_read() {
    let limits = ResourceLimits {
        max_samples: 3,
        max_instances: 2,
        max_samples_per_instance: 2,
    };
    let mut c = Cache::new(History::keep_all(), limits);
    c.insert(&hdr(SampleKind::Data, 1, 1), b"a", o(0)).unwrap();
    c.insert(&hdr(SampleKind::Data, 1, 2), b"b", o(1)).unwrap();
    assert_eq!(
        c.insert(&hdr(SampleKind::Data, 1, 3), b"c", o(2)),
        Err(Rejected::SamplesPerInstance)
    );
    c.insert(&hdr(SampleKind::Data, 2, 4), b"d", o(3)).unwrap();
    assert_eq!(
        c.insert(&hdr(SampleKind::Data, 3, 5), b"e", o(4)),
        Err(Rejected::Instances)
    );
    assert_eq!(
        c.insert(&hdr(SampleKind::Data, 2, 6), b"f", o(5)),
        Err(Rejected::Samples)
    );
    let first = c.access(1, &StateMask::ANY, None, false);
    assert_eq!(first[0].0.sample_state, SampleState::NotRead);
    assert_eq!(first[0].0.view_state, ViewState::New);
    let again = c.access(1, &StateMask::ANY, None, false);
    assert_eq!(again[0].0.sample_state, SampleState::Read);
    assert_eq!(again[0].0.view_state, ViewState::NotNew);
    assert_eq!(c.access(10, &StateMask::NOT_READ, None, false).len(), 2);
}

#[test]
fn dispose_and_rebirth_count_generations() {
    let mut c = Cache::new(History::keep_last(5), ResourceLimits::default());
    c.insert(&hdr(SampleKind::Data, 1, 1), b"a", o(0)).unwrap();
    c.insert(&hdr(SampleKind::Dispose, 1, 2), b"", o(1))
        .unwrap();
    assert_eq!(
        c.instance_state(InstanceHandle(KeyHash([1; 16]))),
        Some(InstanceState::NotAliveDisposed)
    );
    c.insert(&hdr(SampleKind::Data, 1, 3), b"b", o(2)).unwrap();
    let s = c.access(10, &StateMask::ANY, None, true);
    assert_eq!(s.len(), 3);
    assert!(!s[1].0.valid_data);
    assert_eq!(s[2].0.disposed_generation_count, 1);
    assert_eq!(s[2].0.instance_state, InstanceState::Alive);
}

#[test]
fn read_shares_the_bytes_and_the_last_holder_recycles_them() {
    let mut c = Cache::new(History::keep_all(), ResourceLimits::default());
    c.insert(&hdr(SampleKind::Data, 1, 1), b"abc", o(0))
        .unwrap();
    let first = c.access(1, &StateMask::ANY, None, false);
    let again = c.access(1, &StateMask::ANY, None, false);
    let (Payload::Shared(a), Payload::Shared(b)) = (&first[0].1, &again[0].1) else {
        panic!("a read shares the cache's bytes: {first:?} {again:?}");
    };
    assert!(Arc::ptr_eq(a, b), "reading again copies nothing");
    let spare = c.spare.len();
    c.recycle(first.into_iter().map(|(_, p)| p));
    assert_eq!(c.spare.len(), spare, "still shared: not reused");
    let taken = c.access(1, &StateMask::ANY, None, true);
    assert_eq!(taken[0].1.bytes(), b"abc");
    drop(again);
    c.recycle(taken.into_iter().map(|(_, p)| p));
    assert_eq!(
        c.spare.len(),
        spare + 1,
        "the last holder gives the buffer back"
    );
}

fn key(k: u8) -> InstanceHandle {
    InstanceHandle(KeyHash([k; 16]))
}

#[test]
fn ending_an_instance_under_keep_last_keeps_its_last_value_beside_the_notices() {
    // KEEP_LAST 1: the dispose and the unregister do not push out the value written
    // before them.
    let mut c = Cache::new(History::keep_last(1), ResourceLimits::default());
    c.insert(&hdr(SampleKind::Data, 1, 1), b"last", o(0))
        .unwrap();
    c.insert(&hdr(SampleKind::Dispose, 1, 2), b"", o(1))
        .unwrap();
    c.insert(&hdr(SampleKind::Unregister, 1, 3), b"", o(2))
        .unwrap();
    let got = c.access(10, &StateMask::ANY, None, true);
    let seqs: Vec<(u64, bool)> = got
        .iter()
        .map(|s| (s.0.writer_seq, s.0.valid_data))
        .collect();
    assert_eq!(seqs, vec![(1, true), (2, false), (3, false)]);
    assert_eq!(got[0].1.bytes(), b"last");
    assert_eq!(got[0].0.instance_state, InstanceState::NotAliveDisposed);
    assert!(c.is_empty());
}

#[test]
fn a_full_keep_all_instance_still_takes_its_dispose() {
    let limits = ResourceLimits {
        max_samples: 2,
        max_instances: 1,
        max_samples_per_instance: 2,
    };
    let mut c = Cache::new(History::keep_all(), limits);
    c.insert(&hdr(SampleKind::Data, 1, 1), b"a", o(0)).unwrap();
    c.insert(&hdr(SampleKind::Data, 1, 2), b"b", o(1)).unwrap();
    assert_eq!(
        c.insert(&hdr(SampleKind::Data, 1, 3), b"c", o(2)),
        Err(Rejected::SamplesPerInstance),
        "data past the limits is refused"
    );
    assert_eq!(
        c.insert(&hdr(SampleKind::Dispose, 1, 4), b"", o(3)),
        Ok(true)
    );
    assert_eq!(
        c.instance_state(key(1)),
        Some(InstanceState::NotAliveDisposed)
    );
    let got: Vec<(u64, bool)> = c
        .access(10, &StateMask::ANY, None, true)
        .iter()
        .map(|s| (s.0.writer_seq, s.0.valid_data))
        .collect();
    assert_eq!(got, vec![(1, true), (2, true), (4, false)]);
}

#[test]
fn a_lost_writer_ends_its_instances_with_a_notice_where_no_unread_sample_says_so() {
    let mut c = Cache::new(History::keep_last(4), ResourceLimits::default());
    let other = |h: SampleHeader| SampleHeader { writer_id: 2, ..h };
    // Instance 1: taken already. Instance 2: an unread sample. Instance 3: a second
    // writer stays.
    c.insert(&hdr(SampleKind::Data, 1, 1), b"a", o(0)).unwrap();
    assert_eq!(c.access(10, &StateMask::ANY, None, true).len(), 1);
    c.insert(&hdr(SampleKind::Data, 2, 2), b"b", o(1)).unwrap();
    c.insert(&hdr(SampleKind::Data, 3, 3), b"c", o(2)).unwrap();
    c.insert(&other(hdr(SampleKind::Data, 3, 1)), b"d", o(3))
        .unwrap();
    assert_eq!(c.access(10, &StateMask::ANY, Some(key(3)), true).len(), 2);
    let lost = WriterHandle {
        node: 1,
        writer_id: 1,
    };
    assert!(c.writers_gone(&|w| *w == lost), "instance 1 needs a notice");
    assert!(!c.writers_gone(&|w| *w == lost), "once");
    assert_eq!(c.instance_state(key(3)), Some(InstanceState::Alive));
    let got = c.access(10, &StateMask::ANY, None, true);
    let seen: Vec<(InstanceHandle, bool, InstanceState)> = got
        .iter()
        .map(|s| (s.0.instance_handle, s.0.valid_data, s.0.instance_state))
        .collect();
    assert_eq!(
        seen,
        vec![
            (key(2), true, InstanceState::NotAliveNoWriters),
            (key(1), false, InstanceState::NotAliveNoWriters),
        ],
        "instance 2's unread sample carries its state; instance 1 gets a notice"
    );
    let notice = &got[1].0;
    assert_eq!(notice.publication_handle, lost);
    assert_eq!(
        (notice.view_id, notice.order_index),
        (1, crate::sample::ORDER_INDEX_NONE),
        "in no order, in the view of the last sample kept"
    );
    assert!(!notice.in_total_order() && got[0].0.in_total_order());
    assert!(c.is_empty());
}

#[test]
fn an_instances_notices_are_bounded_the_oldest_going_first() {
    let mut c = Cache::new(History::keep_last(1), ResourceLimits::default());
    let by = |w: u32| SampleHeader {
        writer_id: w,
        ..hdr(SampleKind::Dispose, 1, u64::from(w))
    };
    let n = INSTANCE_NOTICES_MAX as u32 + 2;
    for w in 1..=n {
        c.insert(&by(w), b"", o(u64::from(w))).unwrap();
    }
    assert_eq!(c.len(), INSTANCE_NOTICES_MAX);
    let writers: Vec<u32> = c
        .access(100, &StateMask::ANY, None, true)
        .iter()
        .map(|s| s.0.publication_handle.writer_id)
        .collect();
    assert_eq!(writers, (3..=n).collect::<Vec<_>>(), "the newest, in order");
}
