//! The running bridge: per topic, one thread per direction moving undecoded samples.
//!
//! * **RTPS → Spindle**: a RustDDS reader (taken on its own thread, with the topic's key
//!   layout set, polled every [`POLL_IDLE_US`] when idle) feeds one Spindle writer per
//!   topic. Samples of RTPS writers that belong to a bridge (this one, or any other that
//!   announced itself on [`BRIDGES_TOPIC`]) are skipped: what a bridge wrote into RTPS
//!   came from Spindle, so taking it back would loop. Everything the bridge writes into
//!   Spindle gets Spindle's total order: every Spindle reader sees the samples of all RTPS
//!   writers of a topic in one order.
//! * **Spindle → RTPS**: a Spindle reader (KEEP_ALL), woken by a WaitSet on its read
//!   condition (not polled), feeds one RustDDS writer per topic.
//!   Samples of this bridge's own Spindle writer are skipped (by its writer handle).
//!   When a new RTPS reader of another vendor than RustDDS matches, the bridge forwards
//!   one sample and waits (at most [`HANDSHAKE_MS`]) until every reader acknowledged it
//!   before it forwards more: see [`HANDSHAKE_MS`] for why (Cyclone DDS would otherwise
//!   lose the first samples).
//!   Data keeps its bytes and source timestamp; a dispose notice becomes an RTPS dispose
//!   carrying the key's serialization, which the bridge remembers from the instance's
//!   last data sample (at most [`INSTANCE_KEYS_MAX`] per topic); an unregister notice is
//!   not forwarded (RustDDS 0.15 has no unregister).
//!
//! **Two RTPS participants.** The bridge's RTPS readers live in one RustDDS participant and
//! its writers in another. In one participant, a topic bridged both ways had the bridge's
//! reader matched with the bridge's own writer, and RustDDS 0.15 never delivers between
//! the endpoints of one participant (it ignores its own traffic): that reader never
//! acknowledged, so the writer's acknowledgment frontier stayed at its first sample —
//! every [`HANDSHAKE_MS`] wait and the [`LINGER_MS`] at stop ran to their bounds, and after
//! a window of samples (its resource limit, 65,536) every write blocked for
//! [`rtps::RTPS_MAX_BLOCKING_MS`] and failed. Apart, the reader is an ordinary remote
//! reader of the writer: it acknowledges, and what it takes from it is skipped as a
//! bridge's (both prefixes are announced on [`BRIDGES_TOPIC`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use rustdds::{
    no_key, with_key, DataReaderStatus, DataWriterStatus, InstanceState as RtpsInstanceState,
    RTPSEntity, StatusEvented, TopicKind,
};
use spindle_dds_core::{
    Condition, DataReader, DataWriter, DomainParticipant, DomainParticipantFactory, GuardCondition,
    InstanceState, ParticipantConfig, StateMask, WaitSet, WriterHandle,
};
use spindle_qos::{
    DataReaderQos, DataWriterQos, DomainParticipantQos, History, Reliability, TopicQos,
};
use spindle_topics::{CdrSample, KeyHash, KeyedString};

use crate::config::{BridgeConfig, DurabilityKind, ReliabilityKind, TopicConfig};
use crate::error::{Error, Result};
use crate::keys::KeyLayout;
use crate::rtps::{
    self, qos_of, reader_qos_of, split_header, timestamp_from_ns, timestamp_to_ns, with_key_layout,
    RawCdr, RawKey, RawSample,
};

/// How long an RTPS → Spindle thread sleeps when its RustDDS reader had nothing (the
/// timed poll that stands in for RustDDS's mio 0.6 wake-ups, which can be missed). The
/// Spindle → RTPS threads do not poll: a WaitSet wakes them.
pub const POLL_IDLE_US: u64 = 200;

/// Longest single WaitSet wait of a Spindle → RTPS thread before it looks at the RTPS
/// writer's matched readers again (samples and the bridge's stop wake it at once).
pub const WAIT_SLICE_MS: u64 = 50;

/// How long a Spindle → RTPS thread waits, after a new RTPS reader matched, for every
/// reader to acknowledge the one sample it forwarded before it forwards more.
///
/// Why: a Cyclone DDS volatile reader matched with a writer of another vendor starts at
/// the first HEARTBEAT it sees: everything up to that heartbeat's last sequence number
/// that has not yet arrived counts as lost (Cyclone's `handle_Heartbeat`, "the first
/// heartbeat has to be treated specially"). RustDDS 0.15 sends no heartbeat while its
/// history is empty (not even in answer to the reader's non-final ACKNACK), and the one it
/// sends at match time is dropped when it reaches the reader before the reader knows the
/// writer; so the first heartbeat a Cyclone reader saw was piggy-backed on a datagram and
/// announced samples still in the next ones — the early samples the interop test lost (a
/// Cyclone trace showed `HEARTBEAT(#2:1..5)` after DATA 1..3: samples 4 and 5 never came).
/// With one sample and its heartbeat in the same datagram, and no more until it is
/// acknowledged, the first heartbeat announces only what already arrived.
///
/// Only readers of other vendors get it ([`RUSTDDS_VENDOR`]): a RustDDS reader starts at
/// the heartbeat's first sequence number and loses nothing. (On a topic bridged both
/// ways the wait used to run to its bound: the bridge's own reader, in the same RustDDS
/// participant as its writer, never acknowledged — see the module docs, "Two RTPS
/// participants".)
pub const HANDSHAKE_MS: u64 = 2_000;

/// The vendor id RustDDS puts in the first two bytes of its GUID prefixes (RTPS 9.3.1.5
/// says a prefix should start with its vendor's id).
pub const RUSTDDS_VENDOR: [u8; 2] = [0x01, 0x12];

/// Most samples a forwarding thread takes from its Spindle reader at once.
pub const TAKE_BATCH_MAX: usize = 1024;

/// Most samples an RTPS → Spindle thread takes from its RustDDS reader of `topic` at once:
/// all it holds. RustDDS 0.15's `take` moves every new change into the reader's own cache,
/// then lists and sorts that whole cache, whatever the requested count; a smaller batch
/// leaves the rest there to be listed and sorted again by the next take, so a reader that
/// fell behind took ever longer per sample (at 1 KiB from `ddsperf pub`, 85% of the
/// thread's time in `take`, ~37k samples/s, the rest evicted). It is the reader's resource
/// limit, [`TopicConfig::rtps_reader_samples`] (default [`rtps::RTPS_READER_SAMPLES_MAX`]).
pub fn rtps_take_max(topic: &TopicConfig) -> usize {
    // Within 64..=2^22: positive, and fits a usize.
    topic.rtps_reader_samples() as usize
}

/// Most instance keys a Spindle → RTPS topic remembers for disposes (oldest forgotten).
pub const INSTANCE_KEYS_MAX: usize = 1 << 16;

/// How long the bridge lingers at stop, per topic and direction, for what it forwarded to
/// be delivered: by every RTPS reader (its RTPS writers' acknowledgments), and by Spindle
/// (its Spindle writers' `wait_for_acknowledgments`).
pub const LINGER_MS: u64 = 3_000;

/// The Spindle topic on which bridges announce their RTPS participants (key: the GUID
/// prefix in hex), so that no bridge forwards another bridge's RTPS output back.
pub const BRIDGES_TOPIC: &str = "spindle.rtps_bridge.participants";

/// How long a Spindle write from the bridge may block on a full window.
pub const SPINDLE_MAX_BLOCKING_MS: i64 = 10_000;

/// How many dropped samples a bridge logs one by one (after that, every power of two).
pub const DROPS_LOGGED_MAX: u64 = 10;

/// Counters of one bridge, summed over its topics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Samples (data and disposes) written into Spindle.
    pub into_spindle: AtomicU64,
    /// Samples (data and disposes) written into RTPS.
    pub into_rtps: AtomicU64,
    /// Samples not forwarded because they came from a bridge (loop prevention).
    pub skipped_own: AtomicU64,
    /// Samples not forwarded because they could not be (bad bytes, unknown key, a
    /// refused write); each is also logged.
    pub dropped: AtomicU64,
    /// RTPS readers matched with the bridge's RTPS writers now (summed over topics): a
    /// volatile RTPS reader gets only what is written after it matched.
    pub rtps_readers_matched: AtomicI64,
    /// RTPS writers matched with the bridge's RTPS readers now (summed over topics): an
    /// RTPS writer's samples are taken only once its reader knows it.
    pub rtps_writers_matched: AtomicI64,
    /// Bridges known on the registry topic (this one included).
    pub bridges_known: AtomicI64,
    /// Sequence numbers missing between consecutive samples the bridge's RTPS readers
    /// took from one RTPS writer: samples the RTPS side acknowledged but the bridge never
    /// got (RustDDS 0.15's reader evicts its oldest untaken samples past its resource
    /// limit, the topic's `rtps_reader_samples_max`), or that the writer skipped on
    /// purpose (KEEP_LAST replacement, a GAP). Not counted: what a writer wrote before the
    /// reader's first sample of it.
    pub rtps_gaps: AtomicU64,
    /// How many separate gaps [`Stats::rtps_gaps`] sums.
    pub rtps_gap_events: AtomicU64,
    /// Handshakes with a new RTPS reader ([`HANDSHAKE_MS`]) that ran to their bound
    /// without every reader's acknowledgment.
    pub handshake_timeouts: AtomicU64,
    /// Writers that stopped ([`LINGER_MS`]) before what they forwarded was delivered: RTPS
    /// writers before every RTPS reader acknowledged, Spindle writers before Spindle
    /// delivered their last sample.
    pub unacked_at_stop: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    /// See [`Stats::into_spindle`].
    pub into_spindle: u64,
    /// See [`Stats::into_rtps`].
    pub into_rtps: u64,
    /// See [`Stats::skipped_own`].
    pub skipped_own: u64,
    /// See [`Stats::dropped`].
    pub dropped: u64,
    /// See [`Stats::rtps_readers_matched`].
    pub rtps_readers_matched: i64,
    /// See [`Stats::rtps_gaps`].
    pub rtps_gaps: u64,
    /// See [`Stats::handshake_timeouts`].
    pub handshake_timeouts: u64,
    /// See [`Stats::unacked_at_stop`].
    pub unacked_at_stop: u64,
}

impl Stats {
    fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            into_spindle: self.into_spindle.load(Ordering::Relaxed),
            into_rtps: self.into_rtps.load(Ordering::Relaxed),
            skipped_own: self.skipped_own.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            rtps_readers_matched: self.rtps_readers_matched.load(Ordering::Relaxed),
            rtps_gaps: self.rtps_gaps.load(Ordering::Relaxed),
            handshake_timeouts: self.handshake_timeouts.load(Ordering::Relaxed),
            unacked_at_stop: self.unacked_at_stop.load(Ordering::Relaxed),
        }
    }
}

/// GUID prefixes of every bridge's RTPS participant known so far.
type BridgePrefixes = Arc<RwLock<HashSet<[u8; 12]>>>;

/// A running bridge. [`Bridge::stop`] ends it (and lingers for reliable delivery).
pub struct Bridge {
    stop: Arc<AtomicBool>,
    stop_guard: Arc<GuardCondition>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<Stats>,
    spindle: Option<DomainParticipant>,
    _rtps_in: rustdds::DomainParticipant,
    _rtps_out: rustdds::DomainParticipant,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("threads", &self.threads.len())
            .field("stats", &self.stats.snapshot())
            .finish()
    }
}

fn prefix_hex(p: &[u8]) -> String {
    p.iter().map(|b| format!("{b:02x}")).collect()
}

fn prefix_from_hex(s: &str) -> Option<[u8; 12]> {
    let mut out = [0u8; 12];
    if s.len() != 24 {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn spindle_reliability(t: &TopicConfig) -> Reliability {
    match t.reliability {
        ReliabilityKind::Reliable => Reliability {
            max_blocking_time: spindle_qos::Duration::from_millis(SPINDLE_MAX_BLOCKING_MS),
            ..Reliability::reliable()
        },
        ReliabilityKind::BestEffort => Reliability::best_effort(),
    }
}

fn spindle_durability(t: &TopicConfig) -> spindle_qos::DurabilityKind {
    match t.durability {
        DurabilityKind::Volatile => spindle_qos::DurabilityKind::Volatile,
        DurabilityKind::TransientLocal => spindle_qos::DurabilityKind::TransientLocal,
    }
}

impl Bridge {
    /// Starts a bridge: joins the Spindle domain with `spindle_cfg`, creates the RTPS
    /// participant, and for every topic the readers, writers and threads its direction
    /// needs. Returns once every entity exists.
    pub fn start(cfg: &BridgeConfig, spindle_cfg: &ParticipantConfig) -> Result<Bridge> {
        let factory = DomainParticipantFactory::instance();
        let spindle = factory.create_participant(
            spindle_cfg.domain_id,
            DomainParticipantQos::default(),
            spindle_cfg,
        )?;
        // Two RTPS participants, one for the bridge's readers and one for its writers
        // (the module docs say why).
        let rtps_in = rtps::participant(cfg.rtps_domain_id, cfg.only_networks.as_deref())?;
        let rtps_out = rtps::participant(cfg.rtps_domain_id, cfg.only_networks.as_deref())?;
        let own_prefixes = [
            prefix_of_participant(&rtps_in)?,
            prefix_of_participant(&rtps_out)?,
        ];
        let stop = Arc::new(AtomicBool::new(false));
        let stop_guard = GuardCondition::new();
        let stats = Arc::new(Stats::default());
        let prefixes: BridgePrefixes = Arc::new(RwLock::new(HashSet::from(own_prefixes)));
        let mut threads = Vec::new();

        // Announce this bridge and learn the others (reliable + transient local: a bridge
        // that starts later still learns of the earlier ones).
        let registry_qos = TopicQos::default();
        let registry = spindle.create_topic::<KeyedString>(BRIDGES_TOPIC, registry_qos)?;
        let publisher = spindle.create_publisher(Default::default())?;
        let subscriber = spindle.create_subscriber(Default::default())?;
        let reg_reader = subscriber.create_datareader(
            &registry,
            DataReaderQos::default()
                .with_reliability(Reliability::reliable())
                .with_durability(spindle_qos::DurabilityKind::TransientLocal)
                .with_history(History::keep_all()),
        )?;
        let reg_writer = publisher.create_datawriter(
            &registry,
            DataWriterQos::default()
                .with_reliability(Reliability::reliable())
                .with_durability(spindle_qos::DurabilityKind::TransientLocal),
        )?;
        // Key: a participant's prefix; value: the bridge, named by its readers' prefix
        // (a bridge announces two participants).
        for p in &own_prefixes {
            reg_writer.write(&KeyedString {
                key: prefix_hex(p),
                value: format!(
                    "bridge {} in rtps domain {}",
                    prefix_hex(&own_prefixes[0]),
                    cfg.rtps_domain_id
                ),
            })?;
        }
        {
            let stop = Arc::clone(&stop);
            let prefixes = Arc::clone(&prefixes);
            let registry_stats = Arc::clone(&stats);
            let mut waitset = WaitSet::new();
            waitset.attach_condition(reg_reader.create_readcondition(StateMask::ANY));
            waitset.attach_condition(Arc::clone(&stop_guard) as Arc<dyn Condition>);
            threads.push(spawn("bridge-registry", move || {
                let _keep = reg_writer;
                // The bridges by name (two registry samples each), as many as the
                // domain has, like the prefixes.
                let mut bridges: HashSet<String> = HashSet::new();
                while !stop.load(Ordering::Relaxed) {
                    // Woken by a registry sample or the stop guard.
                    let _ = waitset.wait(Duration::from_millis(WAIT_SLICE_MS));
                    match reg_reader.take(TAKE_BATCH_MAX, StateMask::ANY) {
                        Ok(got) if !got.is_empty() => {
                            let mut set = prefixes.write().unwrap_or_else(|e| e.into_inner());
                            for d in got.into_iter().filter_map(|s| s.data) {
                                if let Some(p) = prefix_from_hex(&d.key) {
                                    set.insert(p);
                                    bridges.insert(d.value);
                                }
                            }
                            registry_stats
                                .bridges_known
                                .store(bridges.len() as i64, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!("bridge registry: {e}");
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
            })?);
        }

        let rtps_pub = rtps_out
            .create_publisher(&rustdds::QosPolicies::qos_none())
            .map_err(|e| Error::Rtps(format!("publisher: {e:?}")))?;
        let rtps_sub = rtps_in
            .create_subscriber(&rustdds::QosPolicies::qos_none())
            .map_err(|e| Error::Rtps(format!("subscriber: {e:?}")))?;

        for t in &cfg.topics {
            let kind = if t.key.is_some() {
                TopicKind::WithKey
            } else {
                TopicKind::NoKey
            };
            let rqos = qos_of(t);
            let in_qos = reader_qos_of(t);
            // The topic in the readers' participant gets the reader's QoS: RustDDS keeps
            // the larger of the topic's and the reader's sample limits (`reader_qos_of`).
            let rtopic = |p: &rustdds::DomainParticipant, q: &rustdds::QosPolicies| {
                p.create_topic(t.name.clone(), t.type_name.clone(), q, kind)
                    .map_err(|e| Error::Rtps(format!("topic {:?}: {e:?}", t.name)))
            };
            let stopic = spindle.create_cdr_topic(&t.name, &t.type_name, TopicQos::default())?;
            let mut own_writer: Option<WriterHandle> = None;

            if t.direction.into_spindle() {
                // The RTPS writers it stands for dispose what they dispose: the bridge
                // leaving ends their instances as unregistered (NOT_ALIVE_NO_WRITERS, what
                // its leaving the view would say), not disposed.
                let writer = publisher.create_datawriter(
                    &stopic,
                    DataWriterQos {
                        writer_data_lifecycle: spindle_qos::WriterDataLifecycle {
                            autodispose_unregistered_instances: false,
                        },
                        ..DataWriterQos::default()
                    }
                    .with_reliability(spindle_reliability(t))
                    .with_durability(spindle_durability(t)),
                )?;
                own_writer = Some(WriterHandle {
                    node: spindle.node_id(),
                    writer_id: writer.id(),
                });
                let reader =
                    RtpsReader::create(&rtps_sub, &rtopic(&rtps_in, &in_qos)?, in_qos.clone(), t)?;
                let ctx = Ctx {
                    stop: Arc::clone(&stop),
                    stop_guard: Arc::clone(&stop_guard),
                    stats: Arc::clone(&stats),
                    prefixes: Arc::clone(&prefixes),
                    topic: t.clone(),
                };
                threads.push(spawn(&format!("bridge-in-{}", t.name), move || {
                    rtps_to_spindle(ctx, reader, writer)
                })?);
            }
            if t.direction.into_rtps() {
                let reader = subscriber.create_datareader(
                    &stopic,
                    DataReaderQos::default()
                        .with_reliability(spindle_reliability(t))
                        .with_durability(spindle_durability(t))
                        .with_history(History::keep_all()),
                )?;
                let writer =
                    RtpsWriter::create(&rtps_pub, &rtopic(&rtps_out, &rqos)?, rqos.clone(), t)?;
                let ctx = Ctx {
                    stop: Arc::clone(&stop),
                    stop_guard: Arc::clone(&stop_guard),
                    stats: Arc::clone(&stats),
                    prefixes: Arc::clone(&prefixes),
                    topic: t.clone(),
                };
                threads.push(spawn(&format!("bridge-out-{}", t.name), move || {
                    spindle_to_rtps(ctx, reader, writer, own_writer)
                })?);
            }
        }
        Ok(Bridge {
            stop,
            stop_guard,
            threads,
            stats,
            spindle: Some(spindle),
            _rtps_in: rtps_in,
            _rtps_out: rtps_out,
        })
    }

    /// The live counters (shared with the forwarding threads).
    pub fn stats_handle(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// The counters so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Stops forwarding: each Spindle → RTPS thread first lingers up to [`LINGER_MS`]
    /// for its RTPS writer's samples to be acknowledged. Returns the final counters.
    pub fn stop(mut self) -> StatsSnapshot {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the threads waiting in their WaitSets.
        self.stop_guard.set_trigger_value(true);
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!("a bridge thread panicked");
            }
        }
        if let Some(p) = self.spindle.take() {
            // Leave the domain (a view change without this member), not vanish: in a
            // domain of two, a vanished member costs the other its majority.
            let left = p
                .delete_contained_entities()
                .and_then(|()| p.clone().delete());
            if let Err(e) = left {
                tracing::warn!(error = %e, "the bridge could not leave its Spindle domain cleanly");
                p.close();
            }
        }
        self.stats.snapshot()
    }
}

fn prefix_of_participant(p: &rustdds::DomainParticipant) -> Result<[u8; 12]> {
    p.guid()
        .prefix
        .as_ref()
        .try_into()
        .map_err(|_| Error::Rtps("GUID prefix is not 12 bytes".into()))
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(f)
        .map_err(|e| Error::Rtps(format!("thread {name}: {e}")))
}

struct Ctx {
    stop: Arc<AtomicBool>,
    stop_guard: Arc<GuardCondition>,
    stats: Arc<Stats>,
    prefixes: BridgePrefixes,
    topic: TopicConfig,
}

impl Ctx {
    fn dropped(&self, what: std::fmt::Arguments<'_>) {
        let n = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        // The first ones, then every power of two: a flood stays a few lines.
        if n <= DROPS_LOGGED_MAX || n.is_power_of_two() {
            tracing::warn!("topic {:?}: {what} (dropped so far: {n})", self.topic.name);
        }
    }
}

/// What a bridge's RTPS reader took.
enum Change {
    Data(RawSample),
    Dispose(RawKey),
    Unregister(RawKey),
}

struct Taken {
    change: Change,
    writer: rustdds::GUID,
    writer_prefix: [u8; 12],
    /// The writer's sequence number of this change.
    writer_sn: i64,
    source_timestamp_ns: Option<u64>,
}

enum RtpsReader {
    Keyed(with_key::DataReader<RawSample, RawCdr>),
    Plain(no_key::DataReader<RawSample, RawCdr>),
}

fn prefix_of(g: rustdds::GUID) -> [u8; 12] {
    let mut p = [0u8; 12];
    let bytes = g.prefix.as_ref();
    let n = bytes.len().min(12);
    p[..n].copy_from_slice(&bytes[..n]);
    p
}

impl RtpsReader {
    fn create(
        sub: &rustdds::Subscriber,
        topic: &rustdds::Topic,
        qos: rustdds::QosPolicies,
        t: &TopicConfig,
    ) -> Result<RtpsReader> {
        let r = if t.key.is_some() {
            sub.create_datareader::<RawSample, RawCdr>(topic, Some(qos))
                .map(RtpsReader::Keyed)
        } else {
            sub.create_datareader_no_key::<RawSample, RawCdr>(topic, Some(qos))
                .map(RtpsReader::Plain)
        };
        r.map_err(|e| Error::Rtps(format!("reader of {:?}: {e:?}", t.name)))
    }

    /// The change in matched RTPS writers since the last call.
    fn matched_change(&self) -> i64 {
        let mut change = 0i64;
        loop {
            let st = match self {
                RtpsReader::Keyed(r) => r.try_recv_status(),
                RtpsReader::Plain(r) => r.try_recv_status(),
            };
            match st {
                Some(DataReaderStatus::SubscriptionMatched { current, .. }) => {
                    change += current.count_change() as i64;
                }
                Some(_) => {}
                None => return change,
            }
        }
    }

    /// Takes up to `max` samples ([`rtps_take_max`]: all the reader holds), in order per
    /// writer.
    fn take(
        &mut self,
        layout: Option<&KeyLayout>,
        max: usize,
    ) -> std::result::Result<Vec<Taken>, String> {
        match self {
            RtpsReader::Keyed(r) => {
                let got =
                    with_key_layout(layout, || r.take(max, rustdds::ReadCondition::not_read()))
                        .map_err(|e| format!("{e:?}"))?;
                Ok(got
                    .into_iter()
                    .map(|s| {
                        let info = s.sample_info();
                        let writer = info.writer_guid();
                        let writer_prefix = prefix_of(writer);
                        let writer_sn = i64::from(info.sample_identity().sequence_number);
                        let source_timestamp_ns = info.source_timestamp().map(timestamp_to_ns);
                        let state = info.instance_state();
                        let change = match s.into_value() {
                            with_key::Sample::Value(v) => Change::Data(v),
                            with_key::Sample::Dispose(k)
                                if state == RtpsInstanceState::NotAliveNoWriters =>
                            {
                                Change::Unregister(k)
                            }
                            with_key::Sample::Dispose(k) => Change::Dispose(k),
                        };
                        Taken {
                            change,
                            writer,
                            writer_prefix,
                            writer_sn,
                            source_timestamp_ns,
                        }
                    })
                    .collect())
            }
            RtpsReader::Plain(r) => {
                let got = with_key_layout(None, || r.take(max, rustdds::ReadCondition::not_read()))
                    .map_err(|e| format!("{e:?}"))?;
                Ok(got
                    .into_iter()
                    .map(|s| {
                        let info = s.sample_info();
                        let writer = info.writer_guid();
                        let writer_prefix = prefix_of(writer);
                        let writer_sn = i64::from(info.sample_identity().sequence_number);
                        let source_timestamp_ns = info.source_timestamp().map(timestamp_to_ns);
                        Taken {
                            change: Change::Data(s.into_value()),
                            writer,
                            writer_prefix,
                            writer_sn,
                            source_timestamp_ns,
                        }
                    })
                    .collect())
            }
        }
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A dispose or unregister on Spindle: the bytes do not matter, the key hash does.
fn notice(key: &RawKey) -> CdrSample {
    // A valid empty little-endian encapsulation; `CdrSample::new` cannot refuse it.
    CdrSample::new(vec![0, 1, 0, 0], KeyHash(key.hash)).unwrap_or_default()
}

/// The last sequence number taken from each RTPS writer, to count gaps
/// ([`Stats::rtps_gaps`]); at most [`RTPS_WRITERS_TRACKED_MAX`] writers (then forgotten
/// all at once: a gap across the reset is not counted).
#[derive(Default)]
struct WriterSeqs {
    last: HashMap<rustdds::GUID, i64>,
}

/// Most RTPS writers per topic whose sequence numbers a bridge follows.
pub const RTPS_WRITERS_TRACKED_MAX: usize = 4096;

impl WriterSeqs {
    /// Notes `sn` from `writer`; returns how many sequence numbers were skipped since the
    /// last one taken from it (0 for its first, or one out of order).
    ///
    /// Sequence numbers come from peers: any `i64` is taken, a nonsensical one (negative,
    /// or a jump to `i64::MAX`) counts as a gap like any other, never overflows.
    fn gap(&mut self, writer: rustdds::GUID, sn: i64) -> u64 {
        if self.last.len() >= RTPS_WRITERS_TRACKED_MAX && !self.last.contains_key(&writer) {
            self.last.clear();
        }
        let gap = match self.last.get(&writer) {
            // In i128 the difference of two i64 is exact; it fits a u64 when positive.
            Some(&last) => u64::try_from(i128::from(sn) - i128::from(last) - 1).unwrap_or(0),
            None => 0,
        };
        let e = self.last.entry(writer).or_insert(sn);
        *e = (*e).max(sn);
        // Invariant: bounded by RTPS_WRITERS_TRACKED_MAX.
        assert!(self.last.len() <= RTPS_WRITERS_TRACKED_MAX);
        gap
    }
}

fn rtps_to_spindle(ctx: Ctx, mut reader: RtpsReader, writer: DataWriter<CdrSample>) {
    let layout = ctx.topic.key.clone();
    let take_max = rtps_take_max(&ctx.topic);
    let mut seqs = WriterSeqs::default();
    loop {
        // Read before the take: once stop is seen, one last take forwards what the RTPS
        // reader already holds (and acknowledged to its writers) before the thread ends.
        let stopping = ctx.stop.load(Ordering::Relaxed);
        let change = reader.matched_change();
        if change != 0 {
            ctx.stats
                .rtps_writers_matched
                .fetch_add(change, Ordering::Relaxed);
        }
        let batch = match reader.take(layout.as_ref(), take_max) {
            Ok(b) if b.is_empty() && stopping => break,
            Ok(b) if b.is_empty() => {
                std::thread::sleep(Duration::from_micros(POLL_IDLE_US));
                continue;
            }
            Ok(b) => b,
            Err(e) => {
                ctx.dropped(format_args!("RTPS samples not readable: {e}"));
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_micros(POLL_IDLE_US));
                continue;
            }
        };
        for taken in batch {
            let gap = seqs.gap(taken.writer, taken.writer_sn);
            if gap > 0 {
                // Saturating: a peer's sequence numbers can make one gap near u64::MAX.
                let total = ctx
                    .stats
                    .rtps_gaps
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                        Some(t.saturating_add(gap))
                    })
                    .unwrap_or_else(|t| t)
                    .saturating_add(gap);
                let events = ctx.stats.rtps_gap_events.fetch_add(1, Ordering::Relaxed) + 1;
                // The first ones, then every power of two: a flood stays a few lines.
                if events <= DROPS_LOGGED_MAX || events.is_power_of_two() {
                    tracing::warn!(
                        "topic {:?}: samples {}..{} of RTPS writer {:?} never reached the \
                         bridge ({total} so far): its RTPS reader acknowledged them and \
                         evicted them untaken past {} samples (the writer outran the \
                         bridge; the topic's rtps_reader_samples_max), or the writer \
                         skipped them",
                        ctx.topic.name,
                        // The last one taken + 1: exact, as `gap` came from it.
                        taken.writer_sn.saturating_sub_unsigned(gap),
                        taken.writer_sn.saturating_sub(1),
                        taken.writer,
                        ctx.topic.rtps_reader_samples()
                    );
                }
            }
            forward_into_spindle(&ctx, &writer, taken);
        }
    }
    // The participant closes without a graceful leave (`DomainParticipant::close`), and
    // the view change that removes it delivers only what every survivor received: a
    // sample still in flight at close would be lost although its RTPS writer got our
    // acknowledgment. So wait until Spindle delivered everything this writer wrote.
    if let Err(e) = writer.wait_for_acknowledgments(Duration::from_millis(LINGER_MS)) {
        ctx.stats.unacked_at_stop.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "topic {:?}: stopped before Spindle delivered every forwarded sample: {e}",
            ctx.topic.name
        );
    }
}

fn forward_into_spindle(ctx: &Ctx, writer: &DataWriter<CdrSample>, taken: Taken) {
    let from_bridge = ctx
        .prefixes
        .read()
        .map(|s| s.contains(&taken.writer_prefix))
        .unwrap_or(false);
    if from_bridge {
        ctx.stats.skipped_own.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let ts = taken.source_timestamp_ns.unwrap_or_else(now_ns) as i64;
    let r = match taken.change {
        Change::Data(raw) => {
            let hash = KeyHash(raw.key.hash);
            CdrSample::new(raw.into_encapsulated(), hash)
                .map_err(spindle_dds_core::Error::from)
                .and_then(|s| writer.write_w_timestamp(&s, ts))
        }
        Change::Dispose(k) => writer.dispose(&notice(&k)),
        Change::Unregister(k) => writer.unregister_instance(&notice(&k)),
    };
    match r {
        Ok(()) => {
            ctx.stats.into_spindle.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => ctx.dropped(format_args!("Spindle write refused: {e}")),
    }
}

enum RtpsWriter {
    Keyed(with_key::DataWriter<RawSample, RawCdr>),
    Plain(no_key::DataWriter<RawSample, RawCdr>),
}

impl RtpsWriter {
    fn create(
        publisher: &rustdds::Publisher,
        topic: &rustdds::Topic,
        qos: rustdds::QosPolicies,
        t: &TopicConfig,
    ) -> Result<RtpsWriter> {
        let w = if t.key.is_some() {
            publisher
                .create_datawriter::<RawSample, RawCdr>(topic, Some(qos))
                .map(RtpsWriter::Keyed)
        } else {
            publisher
                .create_datawriter_no_key::<RawSample, RawCdr>(topic, Some(qos))
                .map(RtpsWriter::Plain)
        };
        w.map_err(|e| Error::Rtps(format!("writer of {:?}: {e:?}", t.name)))
    }

    fn write(&self, s: RawSample, ts_ns: i64) -> std::result::Result<(), String> {
        let ts = Some(timestamp_from_ns(ts_ns.max(0) as u64));
        match self {
            // Display, not Debug: RustDDS's Debug of a refused write prints the sample.
            RtpsWriter::Keyed(w) => w.write(s, ts).map_err(|e| e.to_string()),
            RtpsWriter::Plain(w) => w.write(s, ts).map_err(|e| e.to_string()),
        }
    }

    fn dispose(&self, k: &RawKey, ts_ns: i64) -> std::result::Result<(), String> {
        match self {
            RtpsWriter::Keyed(w) => w
                .dispose(k, Some(timestamp_from_ns(ts_ns.max(0) as u64)))
                .map_err(|e| e.to_string()),
            RtpsWriter::Plain(_) => Err("dispose on a keyless topic".into()),
        }
    }

    /// The change in matched RTPS readers since the last call, and whether a reader of
    /// another vendor than RustDDS matched (it needs the [`HANDSHAKE_MS`] handshake).
    fn matched_change(&self) -> (i64, bool) {
        let mut change = 0i64;
        let mut foreign = false;
        loop {
            let st = match self {
                RtpsWriter::Keyed(w) => w.try_recv_status(),
                RtpsWriter::Plain(w) => w.try_recv_status(),
            };
            match st {
                Some(DataWriterStatus::PublicationMatched {
                    current, reader, ..
                }) => {
                    let added = current.count_change() > 0;
                    change += current.count_change() as i64;
                    foreign |= added && prefix_of(reader)[..2] != RUSTDDS_VENDOR;
                }
                Some(_) => {}
                None => return (change, foreign),
            }
        }
    }

    /// Waits up to [`HANDSHAKE_MS`] until every matched reliable RTPS reader acknowledged
    /// everything written so far; true when they did.
    fn handshake(&self) -> bool {
        let wait = Duration::from_millis(HANDSHAKE_MS);
        let acked = match self {
            RtpsWriter::Keyed(w) => w.wait_for_acknowledgments(wait),
            RtpsWriter::Plain(w) => w.wait_for_acknowledgments(wait),
        };
        matches!(acked, Ok(true))
    }

    /// Waits up to [`LINGER_MS`] for every reader's acknowledgment; true when they came.
    fn linger(&self) -> bool {
        let wait = rustdds::Duration::from_millis(LINGER_MS as i64).to_std();
        let acked = match self {
            RtpsWriter::Keyed(w) => w.wait_for_acknowledgments(wait),
            RtpsWriter::Plain(w) => w.wait_for_acknowledgments(wait),
        };
        let ok = matches!(acked, Ok(true));
        if !ok {
            tracing::warn!("RTPS writer stopped before every reader acknowledged: {acked:?}");
        }
        ok
    }
}

/// Instance keys seen on a Spindle → RTPS topic, bounded by [`INSTANCE_KEYS_MAX`].
#[derive(Default)]
struct KnownKeys {
    by_hash: HashMap<[u8; 16], RawKey>,
    order: VecDeque<[u8; 16]>,
}

impl KnownKeys {
    fn remember(&mut self, k: &RawKey) {
        if self.by_hash.insert(k.hash, k.clone()).is_none() {
            self.order.push_back(k.hash);
            if self.order.len() > INSTANCE_KEYS_MAX {
                if let Some(old) = self.order.pop_front() {
                    self.by_hash.remove(&old);
                }
            }
        }
        // Invariant: the two hold the same instances, at most INSTANCE_KEYS_MAX.
        assert!(self.by_hash.len() == self.order.len() && self.order.len() <= INSTANCE_KEYS_MAX);
    }
}

fn spindle_to_rtps(
    ctx: Ctx,
    reader: DataReader<CdrSample>,
    writer: RtpsWriter,
    own_writer: Option<WriterHandle>,
) {
    let mut keys = KnownKeys::default();
    let mut waitset = WaitSet::new();
    waitset.attach_condition(reader.create_readcondition(StateMask::ANY));
    waitset.attach_condition(Arc::clone(&ctx.stop_guard) as Arc<dyn Condition>);
    // A new RTPS reader matched: forward one sample, then wait for acknowledgments
    // (HANDSHAKE_MS says why).
    let mut handshake = false;
    while !ctx.stop.load(Ordering::Relaxed) {
        // Woken by a Spindle sample or the stop guard; the slice bounds how late a
        // match is noticed when no sample comes.
        let _ = waitset.wait(Duration::from_millis(WAIT_SLICE_MS));
        let (change, foreign) = writer.matched_change();
        if change != 0 {
            ctx.stats
                .rtps_readers_matched
                .fetch_add(change, Ordering::Relaxed);
        }
        handshake |= foreign;
        let max = if handshake { 1 } else { TAKE_BATCH_MAX };
        let got = match reader.take(max, StateMask::ANY) {
            Ok(g) => g,
            Err(e) => {
                ctx.dropped(format_args!("Spindle take failed: {e}"));
                std::thread::sleep(Duration::from_millis(WAIT_SLICE_MS));
                continue;
            }
        };
        let mut wrote = false;
        for s in got {
            if Some(s.info.publication_handle) == own_writer {
                ctx.stats.skipped_own.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let ts = s.info.source_timestamp_ns;
            let r = match s.data {
                Some(cdr) => forward_data(&ctx, &mut keys, &writer, &cdr, ts),
                None if s.info.instance_state == InstanceState::NotAliveDisposed => {
                    match keys.by_hash.get(&s.info.instance_handle.0 .0) {
                        Some(k) => writer.dispose(k, ts),
                        None => Err(format!(
                            "dispose of instance {} whose key was never seen",
                            s.info.instance_handle.0
                        )),
                    }
                }
                // Unregister notices: RustDDS 0.15 cannot send one.
                None => continue,
            };
            match r {
                Ok(()) => {
                    wrote = true;
                    ctx.stats.into_rtps.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => ctx.dropped(format_args!("not forwarded to RTPS: {e}")),
            }
        }
        if handshake && wrote {
            if !writer.handshake() {
                ctx.stats.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "topic {:?}: a new RTPS reader did not acknowledge within {HANDSHAKE_MS} ms",
                    ctx.topic.name
                );
            }
            handshake = false;
        }
    }
    if !writer.linger() {
        ctx.stats.unacked_at_stop.fetch_add(1, Ordering::Relaxed);
    }
}

fn forward_data(
    ctx: &Ctx,
    keys: &mut KnownKeys,
    writer: &RtpsWriter,
    cdr: &CdrSample,
    ts: i64,
) -> std::result::Result<(), String> {
    let (encoding, body) = split_header(cdr.bytes()).map_err(|e| e.to_string())?;
    let key = match &ctx.topic.key {
        Some(layout) => {
            let k = RawKey::extract(
                layout,
                body,
                encoding == rustdds::RepresentationIdentifier::CDR_LE,
            )
            .map_err(|e| e.to_string())?;
            keys.remember(&k);
            k
        }
        None => RawKey::default(),
    };
    writer.write(RawSample::new(encoding, body, key), ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sequence numbers from a peer are any `i64`: jumps to either end count as gaps (or
    /// as out of order) and never overflow.
    #[test]
    fn gap_takes_any_peer_sequence_number_without_overflow() {
        let w = rustdds::GUID::GUID_UNKNOWN;
        let mut seqs = WriterSeqs::default();
        assert_eq!(seqs.gap(w, 1), 0);
        assert_eq!(seqs.gap(w, 3), 1);
        assert_eq!(seqs.gap(w, i64::MAX), (i64::MAX - 4) as u64);
        // After i64::MAX every number is out of order (last + 1 overflowed before).
        assert_eq!(seqs.gap(w, i64::MAX), 0);
        assert_eq!(seqs.gap(w, 5), 0);

        let mut seqs = WriterSeqs::default();
        assert_eq!(seqs.gap(w, i64::MIN), 0);
        assert_eq!(seqs.gap(w, -1), (i64::MAX - 1) as u64);
        let mut seqs = WriterSeqs::default();
        seqs.gap(w, i64::MIN);
        // The largest gap there is: every other i64.
        assert_eq!(seqs.gap(w, i64::MAX), u64::MAX - 1);
    }
}
