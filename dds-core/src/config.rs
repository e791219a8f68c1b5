//! A participant's configuration: a TOML file, with environment overrides (docs/design.md §5).
//!
//! ```toml
//! domain_id = 0
//! node_id = 2
//! transport = "tcp"            # "tcp", "shm", "libfabric" or "verbs"
//! listen = "127.0.0.1:7402"    # tcp: host:port; shm: a namespace shared by the domain;
//!                              # libfabric, verbs: host:port of the side channel
//! # provider = "tcp;ofi_rxm"   # libfabric only: the provider ("" or absent: libfabric's choice)
//! # device = "mlx5_0"          # verbs only: the RDMA device that must be opened
//! bootstrap = [1]              # the nodes that start the domain's first view together
//! window_slots = 64            # ring slots per writer (a power of two is used)
//! slot_payload_bytes = 4096    # largest message when the type is unbounded
//! sample_bytes_max = 268435456 # larger samples by RDMC, up to this (the default, 256 MiB; 0: off)
//! large_window_messages = 1    # large samples in flight per writer (1..=3; each a buffer per member)
//! entity_timeout_ms = 10000    # how long create_*/delete_* wait for their view change
//! spin_before_park_us = 1000   # how long the predicate thread spins idle before it parks
//! busy_yield_us = 0            # a latency setting: after this long at work the predicate thread yields once (0: never)
//! predicate_cpus = []          # optional: the CPUs the predicate thread may run on (empty: the process's)
//! predicate_fifo_priority = 0  # 1..=99: the predicate thread in SCHED_FIFO at it (needs CAP_SYS_NICE; 0: time-shared)
//! data_dir = "/var/lib/spindle/node-2" # optional: the logs of PERSISTENT topics
//! rejoin = false               # excluded (hung, cut off): join again as a new member
//!
//! [[contacts]]                 # members to join through (and the bootstrap members' addresses)
//! node = 1
//! address = "127.0.0.1:7401"
//!
//! [fabric]                     # optional; every key defaults to the fabric's default
//! probe_interval_ms = 10       # how often idle peers are probed
//! suspect_floor_ms = 50        # never suspect a peer after less silence than this
//! suspect_ceiling_ms = 2000    # always suspect a peer silent this long
//! suspect_deviations = 4       # learned bound: mean gap + this many deviations
//! outbound_bytes_max = 67108864
//! connect_timeout_ms = 5000
//! read_spin_us = 1000         # at most this long a link's reader polls before it blocks
//! domain_secret_file = "/etc/spindle/domain.key"  # or domain_secret = "..." (16+ bytes)
//! encrypt_links = true         # with a secret: encrypt tcp links (the default)
//!
//! [dare]                       # optional: the dare subgroups of atomic_ordering = "dare"
//! heartbeat_us = 1000          # how often a DARE leader beats
//! election_timeout_us = 10000  # at least twice heartbeat_us; each term draws [this, 2x)
//! log_entries = 1024           # slots of each member's log ring
//! sender_window = 256          # messages a writer has at the leader, not yet delivered
//! ```
//!
//! A domain secret makes every link start with a handshake that proves both sides know
//! it (`spindle_transport_rdma::trust`): a process without it is refused before it sees
//! a region or reaches the membership protocol. It is never logged (its `Debug` is
//! redacted). Prefer the key file or the environment to the secret itself in the file.
//!
//! The `[fabric]` keys are those of `spindle_transport_rdma::FabricConfig`: the failure
//! detector decides how long a hung (stopped, swapped-out, cut-off) member stalls the
//! others before it is excluded, and how easily a live but slow one is suspected.
//!
//! Environment variables override the file: `SPINDLE_DOMAIN_ID`, `SPINDLE_NODE_ID`,
//! `SPINDLE_TRANSPORT`, `SPINDLE_LISTEN`, `SPINDLE_BOOTSTRAP` (comma-separated ids),
//! `SPINDLE_CONTACTS` (`id=address,id=address`), `SPINDLE_SPIN_BEFORE_PARK_US`,
//! `SPINDLE_BUSY_YIELD_US`, `SPINDLE_PREDICATE_CPUS` (comma-separated CPUs),
//! `SPINDLE_PREDICATE_FIFO_PRIORITY`,
//! `SPINDLE_DATA_DIR`, `SPINDLE_DOMAIN_SECRET` (the secret), `SPINDLE_DOMAIN_SECRET_FILE`
//! (a key file), `SPINDLE_ENCRYPT_LINKS` and `SPINDLE_REJOIN` (`true`/`false`),
//! `SPINDLE_ATOMIC_ORDERING`, and the `[dare]` keys as `SPINDLE_DARE_HEARTBEAT_US`,
//! `SPINDLE_DARE_ELECTION_TIMEOUT_US`, `SPINDLE_DARE_LOG_ENTRIES` and
//! `SPINDLE_DARE_SENDER_WINDOW`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use spindle_group::DareSettings;
use spindle_transport_rdma::{DomainSecret, FabricConfig, NodeId};

use crate::declare::{check_dare_settings, TOPIC_SUBGROUPS_DEFAULT, TOPIC_SUBGROUPS_MAX};
use crate::error::{Error, Result};

/// The transport a participant uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// TCP on loopback (or any address the machine has).
    Tcp,
    /// Shared memory between processes of one host.
    Shm,
    /// libfabric (RDMA-style one-sided writes through any libfabric provider: `verbs`,
    /// `efa`, `tcp;ofi_rxm`, `shm`, …), with [`ParticipantConfig::provider`]. Needs the
    /// `libfabric` cargo feature (and the system's libfabric).
    Libfabric,
    /// InfiniBand/RoCE verbs over RC queue pairs, on [`ParticipantConfig::device`]. Needs
    /// the `verbs` cargo feature (and rdma-core's libibverbs).
    Verbs,
}

impl Transport {
    /// The name the TOML uses.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Shm => "shm",
            Transport::Libfabric => "libfabric",
            Transport::Verbs => "verbs",
        }
    }
}

/// One member to contact.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    /// Its node id.
    pub node: NodeId,
    /// Its address (`host:port` for tcp; `@spindle-<namespace>-<node>` for shm, which
    /// [`ParticipantConfig::shm_address`] builds).
    pub address: String,
}

/// How one participant joins its domain.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParticipantConfig {
    /// The domain (one top-level group per domain).
    #[serde(default)]
    pub domain_id: u32,
    /// This participant's node id, unique in the domain.
    pub node_id: NodeId,
    /// The transport.
    pub transport: Transport,
    /// Where to listen: `host:port` for tcp, a namespace for shm.
    pub listen: String,
    /// The nodes that start the domain together (each of them lists all of them, and
    /// the contacts give their addresses). Everyone else joins through the contacts.
    #[serde(default)]
    pub bootstrap: Vec<NodeId>,
    /// Members to contact.
    #[serde(default)]
    pub contacts: Vec<Contact>,
    /// Ring slots per writer.
    #[serde(default = "default_window_slots")]
    pub window_slots: usize,
    /// Slot payload for types without a bound.
    #[serde(default = "default_slot_payload_bytes")]
    pub slot_payload_bytes: usize,
    /// The largest sample a writer of this participant may write (header included):
    /// samples above the slot go by RDMC in the same order; 0: none, a sample must fit
    /// the slot. Default [`SAMPLE_BYTES_MAX_DEFAULT`] (256 MiB, also the most,
    /// [`SAMPLE_BYTES_MAX_LIMIT`]). Rounded up to a power of two and declared per writer
    /// whose type can exceed its slot; every member of a subgroup with such a writer then
    /// registers, per such sender, a buffer of that many bytes. That is address space,
    /// not memory: pages are allocated when a large sample first writes them, and pages
    /// past `RDMC_RESIDENT_BYTES` (16 MiB) of a buffer go back to the kernel once its
    /// sample is delivered (tcp, shm, libfabric; verbs pins registered memory, so there
    /// the whole buffer is resident). TOML `sample_bytes_max`, env
    /// `SPINDLE_SAMPLE_BYTES_MAX`.
    #[serde(default = "default_sample_bytes_max")]
    pub sample_bytes_max: usize,
    /// Large samples (above the slot) one of this participant's writers may have in
    /// flight: RDMC send buffers per writer, and receive buffers per such writer at every
    /// member of its subgroup (the subgroup takes the largest any writer's participant
    /// declares). One (the default, [`crate::declare::LARGE_WINDOW_MESSAGES`]): a writer's
    /// next large sample is copied in once every member delivered the last. Two or three:
    /// the next one is copied and sent while the last is still in flight, which measured
    /// faster on idle cores (docs/benchmarks.md, issue 14) at the cost of that many
    /// buffers of `sample_bytes_max` each (address space; at most 16 MiB of each stays
    /// resident, except on verbs). 1..=[`crate::declare::LARGE_WINDOW_MESSAGES_MAX`].
    /// TOML `large_window_messages`, env `SPINDLE_LARGE_WINDOW_MESSAGES`.
    #[serde(default = "default_large_window_messages")]
    pub large_window_messages: usize,
    /// How long entity creation and deletion wait for their view change.
    #[serde(default = "default_entity_timeout_ms")]
    pub entity_timeout_ms: u64,
    /// How many subgroups the domain's topics hash onto
    /// ([`crate::declare::subgroup_of`]): topics that share one share its total order
    /// and its rings. Fewer: more topics per ring, more batching, one order across more
    /// topics. More: topics with different writers and readers meet less often. The same
    /// in every participant of a domain (a participant that differs from the domain's
    /// first member is refused when it joins). 1..=[`TOPIC_SUBGROUPS_MAX`].
    #[serde(default = "default_topic_subgroups")]
    pub topic_subgroups: u32,
    /// The fabric's settings (the `[fabric]` table): failure detection, queue bounds,
    /// connect time-out. Checked by [`ParticipantConfig::validate`].
    #[serde(default, deserialize_with = "fabric_from_toml")]
    pub fabric: FabricConfig,
    /// How long the predicate thread keeps looking for work (yielding the core between
    /// looks) after its last work before it parks on the transport's doorbell, at most
    /// [`SPIN_BEFORE_PARK_US_MAX`]. Longer saves the wake-up of a parked thread when
    /// samples come often; shorter leaves the cores to other threads sooner. A stream
    /// whose period sits just past it (samples every 1.0–2.0 ms against 1 ms) makes the
    /// thread's spin grow to cover the period, up to twice this
    /// (`spindle_group::runtime::IDLE_SPIN_GROWTH_MAX`).
    #[serde(default = "default_spin_before_park_us")]
    pub spin_before_park_us: u64,
    /// After this long at work without an idle round, the predicate thread yields its
    /// core once (`spindle_group::runtime::Spin::busy_yield_us`); 0 (the default): never,
    /// at most [`BUSY_YIELD_US_MAX`]. A latency setting for machines where processes
    /// share cores: a topic's samples beside another subgroup's bulk stream wait at most
    /// about this long for a predicate thread busy with the stream, not its time slice
    /// (measured with 50 on two vCPUs: a ping's p99 beside a 64 KiB stream about 3×
    /// lower, streams over tcp up to a fifth slower; docs/benchmarks.md).
    #[serde(default)]
    pub busy_yield_us: u64,
    /// The CPUs the predicate thread may run on (`spindle_group::sched::ThreadSched`);
    /// empty (the default): the process's own. Each below
    /// `spindle_group::sched::THREAD_CPUS_MAX`; one the machine lacks fails the
    /// participant's creation, naming this setting.
    #[serde(default)]
    pub predicate_cpus: Vec<usize>,
    /// 1..=99: the predicate thread runs in the real-time class `SCHED_FIFO` at this
    /// priority, ahead of every time-shared thread, so a topic's samples do not wait for
    /// the scheduler to give the engine a core back; 0 (the default): time-shared. Needs
    /// `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` at least this high, or the participant's
    /// creation fails naming this setting. A real-time thread that spins keeps its core
    /// from the application's threads: with this on, set `spin_before_park_us = 0` unless
    /// `predicate_cpus` gives the thread a core of its own (docs/benchmarks.md, "The
    /// predicate thread in the real-time class").
    #[serde(default)]
    pub predicate_fifo_priority: u8,
    /// Where this participant keeps the logs of its DURABILITY PERSISTENT (LoggedStore)
    /// topics: one subdirectory per topic subgroup (`subgroup-<id>`) and the log of
    /// installed views (`views`); see [`crate::logged`]. Without it, PERSISTENT topics
    /// are refused. One directory per participant: two processes must not share one.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The libfabric provider (`transport = "libfabric"` only): `"tcp;ofi_rxm"`, `"verbs;ofi_rxm"`,
    /// `"efa"`, `"shm"`; absent or empty: libfabric's choice.
    #[serde(default)]
    pub provider: Option<String>,
    /// The RDMA device (`transport = "verbs"` only), e.g. `"mlx5_0"`; absent: the first.
    #[serde(default)]
    pub device: Option<String>,
    /// The `[metrics]` table: the optional Prometheus endpoint ([`crate::metrics`]; off
    /// by default).
    #[serde(default)]
    pub metrics: crate::metrics::MetricsConfig,
    /// What the participant does when the group goes on without it (it was stopped,
    /// swapped out or cut off long enough to be excluded, or it lost the majority):
    /// `false` (the default), it stops, and [`crate::DomainParticipant::stopped`] and the
    /// stopped listener say why; `true`, it also joins again as a new member with the
    /// same node id, its readers and writers kept: it receives the stores' state like any
    /// joiner, its entities are announced again, and writes wait (up to RELIABILITY's
    /// `max_blocking_time`) while it rejoins, as through a view change. What the group
    /// delivered while it was out is not delivered to it (a joiner's state is the
    /// stores', not the history). Retried every [`crate::REJOIN_RETRY_MS`] until it
    /// succeeds or the participant is deleted. Not with a `data_dir` (yet): a logged
    /// participant that lost its place is restarted instead. TOML `rejoin`, env
    /// `SPINDLE_REJOIN`.
    #[serde(default)]
    pub rejoin: bool,
    /// How the participant's writers ask the domain to order Atomic-level topics
    /// (RELIABLE and VOLATILE): [`AtomicOrdering::RoundRobin`] (the default: Derecho's
    /// round-robin over senders, no leader) or [`AtomicOrdering::Dare`] (a leader per
    /// term orders everything and replicates it by one-sided writes, DARE). A topic
    /// subgroup is ordered by DARE when any of its Atomic writers asks for it, for every
    /// topic hashed onto it; its samples must then fit the slot (no RDMC), and
    /// `topic_subgroups` may be at most `DARE_SUBGROUPS_MAX` (16). TOML
    /// `atomic_ordering = "round_robin"` or `"dare"`, env `SPINDLE_ATOMIC_ORDERING`;
    /// another value is an error naming the setting and the values it takes.
    #[serde(default)]
    pub atomic_ordering: AtomicOrdering,
    /// The settings this participant's DARE writers ask their dare subgroups to run with
    /// (with `atomic_ordering = "dare"`): the leader's heartbeat, the election time-out
    /// (at least twice the heartbeat; a member draws its time-out in `[this, 2×)` per
    /// term, doubled after each election it began without a leader), the log ring's
    /// slots and each writer's messages in flight at the leader. They travel in the
    /// participant's declaration; a subgroup whose DARE writers ask for different
    /// settings runs with the largest of each (the most tolerant timing, the largest
    /// log and window). The `[dare]` TOML table (`heartbeat_us`, `election_timeout_us`,
    /// `log_entries`, `sender_window`; every key optional, the defaults
    /// `spindle_group::layout::DARE_MODE_*_DEFAULT`), env `SPINDLE_DARE_HEARTBEAT_US`,
    /// `SPINDLE_DARE_ELECTION_TIMEOUT_US`, `SPINDLE_DARE_LOG_ENTRIES`,
    /// `SPINDLE_DARE_SENDER_WINDOW`. Bounds: [`crate::declare::check_dare_settings`]; a
    /// value out of them is an error naming the key.
    #[serde(default, deserialize_with = "dare_from_toml")]
    pub dare: DareSettings,
}

/// How an Atomic-level topic subgroup is ordered ([`ParticipantConfig::atomic_ordering`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AtomicOrdering {
    /// Derecho's round-robin over the subgroup's senders (`DeliveryMode::Atomic`).
    #[default]
    RoundRobin,
    /// A DARE leader per term (`DeliveryMode::Dare`).
    Dare,
}

impl std::str::FromStr for AtomicOrdering {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "round_robin" => Ok(AtomicOrdering::RoundRobin),
            "dare" => Ok(AtomicOrdering::Dare),
            other => Err(format!("{other:?}: expected round_robin or dare")),
        }
    }
}

fn default_topic_subgroups() -> u32 {
    TOPIC_SUBGROUPS_DEFAULT
}

/// The `[fabric]` table: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FabricToml {
    probe_interval_ms: Option<u64>,
    suspect_floor_ms: Option<u64>,
    suspect_ceiling_ms: Option<u64>,
    suspect_deviations: Option<u32>,
    outbound_bytes_max: Option<usize>,
    connect_timeout_ms: Option<u64>,
    domain_secret: Option<String>,
    domain_secret_file: Option<std::path::PathBuf>,
    encrypt_links: Option<bool>,
    read_spin_us: Option<u64>,
}

/// The `[dare]` table: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DareToml {
    heartbeat_us: Option<u64>,
    election_timeout_us: Option<u64>,
    log_entries: Option<usize>,
    sender_window: Option<usize>,
}

fn dare_from_toml<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<DareSettings, D::Error> {
    let t = DareToml::deserialize(d)?;
    let f = DareSettings::default();
    Ok(DareSettings {
        heartbeat_us: t.heartbeat_us.unwrap_or(f.heartbeat_us),
        election_timeout_us: t.election_timeout_us.unwrap_or(f.election_timeout_us),
        log_entries: t.log_entries.unwrap_or(f.log_entries),
        sender_window: t.sender_window.unwrap_or(f.sender_window),
    })
}

fn fabric_from_toml<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<FabricConfig, D::Error> {
    use serde::de::Error as _;
    let t = FabricToml::deserialize(d)?;
    let f = FabricConfig::default();
    let domain_secret = match (&t.domain_secret, &t.domain_secret_file) {
        (Some(_), Some(_)) => {
            return Err(D::Error::custom(
                "[fabric] domain_secret and domain_secret_file: set one, not both",
            ))
        }
        (Some(text), None) => Some(
            DomainSecret::new(text.as_bytes())
                .map_err(|e| D::Error::custom(format!("[fabric] domain_secret: {e}")))?,
        ),
        (None, Some(path)) => Some(
            DomainSecret::from_file(path)
                .map_err(|e| D::Error::custom(format!("[fabric] domain_secret_file: {e}")))?,
        ),
        (None, None) => None,
    };
    Ok(FabricConfig {
        domain_secret,
        encrypt_links: t.encrypt_links.unwrap_or(f.encrypt_links),
        probe_interval_ms: t.probe_interval_ms.unwrap_or(f.probe_interval_ms),
        suspect_floor_ms: t.suspect_floor_ms.unwrap_or(f.suspect_floor_ms),
        suspect_ceiling_ms: t.suspect_ceiling_ms.unwrap_or(f.suspect_ceiling_ms),
        suspect_deviations: t.suspect_deviations.unwrap_or(f.suspect_deviations),
        outbound_bytes_max: t.outbound_bytes_max.unwrap_or(f.outbound_bytes_max),
        connect_timeout_ms: t.connect_timeout_ms.unwrap_or(f.connect_timeout_ms),
        read_spin_us: t.read_spin_us.unwrap_or(f.read_spin_us),
    })
}

pub use crate::declare::SAMPLE_BYTES_MAX_LIMIT;

/// The default [`ParticipantConfig::sample_bytes_max`]: the limit, 256 MiB (its buffers
/// cost address space until large samples use them).
pub const SAMPLE_BYTES_MAX_DEFAULT: usize = SAMPLE_BYTES_MAX_LIMIT;

/// A TOML error naming `origin`. The full message quotes the offending line, so an error
/// about the domain secret gives only its own words: the secret stays out of logs.
fn toml_error(origin: &str, e: &toml::de::Error) -> Error {
    if e.message().contains("domain_secret") {
        Error::Config(format!("{origin}: {}", e.message()))
    } else {
        Error::Config(format!("{origin}: {e}"))
    }
}

/// The longest [`ParticipantConfig::spin_before_park_us`] accepted.
pub const SPIN_BEFORE_PARK_US_MAX: u64 = 100_000;
/// The longest [`ParticipantConfig::busy_yield_us`] accepted.
pub const BUSY_YIELD_US_MAX: u64 = 100_000;

fn default_window_slots() -> usize {
    64
}
fn default_slot_payload_bytes() -> usize {
    4096
}
fn default_sample_bytes_max() -> usize {
    SAMPLE_BYTES_MAX_DEFAULT
}
fn default_large_window_messages() -> usize {
    crate::declare::LARGE_WINDOW_MESSAGES
}
fn default_entity_timeout_ms() -> u64 {
    10_000
}
fn default_spin_before_park_us() -> u64 {
    1_000
}

/// A [`spindle_group::Error::ThreadSched`] named by the participant's setting
/// (`predicate_cpus`, `predicate_fifo_priority`); any other error as it is.
pub(crate) fn predicate_setting_error(e: spindle_group::Error) -> Error {
    match e {
        spindle_group::Error::ThreadSched { setting, why } => {
            Error::Config(format!("predicate_{setting} = {why}"))
        }
        other => other.into(),
    }
}

impl ParticipantConfig {
    /// The predicate thread's CPUs and class, from `predicate_cpus` and
    /// `predicate_fifo_priority`; an error names the setting.
    pub fn thread_sched(&self) -> Result<spindle_group::sched::ThreadSched> {
        spindle_group::sched::ThreadSched::default()
            .with_cpus(&self.predicate_cpus)
            .and_then(|s| s.with_fifo_priority(self.predicate_fifo_priority))
            .map_err(predicate_setting_error)
    }

    /// A configuration with defaults for everything but the essentials.
    pub fn new(node_id: NodeId, transport: Transport, listen: impl Into<String>) -> Self {
        ParticipantConfig {
            domain_id: 0,
            node_id,
            transport,
            listen: listen.into(),
            bootstrap: Vec::new(),
            contacts: Vec::new(),
            window_slots: default_window_slots(),
            slot_payload_bytes: default_slot_payload_bytes(),
            sample_bytes_max: default_sample_bytes_max(),
            large_window_messages: default_large_window_messages(),
            entity_timeout_ms: default_entity_timeout_ms(),
            topic_subgroups: default_topic_subgroups(),
            fabric: FabricConfig::default(),
            spin_before_park_us: default_spin_before_park_us(),
            busy_yield_us: 0,
            predicate_cpus: Vec::new(),
            predicate_fifo_priority: 0,
            data_dir: None,
            provider: None,
            device: None,
            metrics: Default::default(),
            rejoin: false,
            atomic_ordering: AtomicOrdering::RoundRobin,
            dare: DareSettings::default(),
        }
    }

    /// The shm address of `node` in `namespace`.
    pub fn shm_address(namespace: &str, node: NodeId) -> String {
        format!("@spindle-{namespace}-{node}")
    }

    /// Parses TOML text; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self> {
        let cfg: ParticipantConfig = toml::from_str(text).map_err(|e| toml_error(origin, &e))?;
        cfg.validate(origin)?;
        Ok(cfg)
    }

    /// Reads a TOML file, then applies the environment overrides.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("{origin}: cannot read: {e}")))?;
        let mut cfg: ParticipantConfig =
            toml::from_str(&text).map_err(|e| toml_error(&origin, &e))?;
        cfg.apply_env(|k| std::env::var(k).ok())?;
        cfg.validate(&origin)?;
        Ok(cfg)
    }

    /// Applies overrides from `var` (the environment, or a map in tests).
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<()> {
        let num = |k: &str, v: String| -> Result<u32> {
            v.trim()
                .parse()
                .map_err(|_| Error::Config(format!("{k}={v:?} is not a number")))
        };
        if let Some(v) = var("SPINDLE_DOMAIN_ID") {
            self.domain_id = num("SPINDLE_DOMAIN_ID", v)?;
        }
        if let Some(v) = var("SPINDLE_NODE_ID") {
            self.node_id = num("SPINDLE_NODE_ID", v)?;
        }
        if let Some(v) = var("SPINDLE_TRANSPORT") {
            self.transport = match v.trim() {
                "tcp" => Transport::Tcp,
                "shm" => Transport::Shm,
                other => {
                    return Err(Error::Config(format!(
                        "SPINDLE_TRANSPORT={other:?}: expected tcp or shm"
                    )))
                }
            };
        }
        if let Some(v) = var("SPINDLE_TOPIC_SUBGROUPS") {
            self.topic_subgroups = num("SPINDLE_TOPIC_SUBGROUPS", v)?;
        }
        if let Some(v) = var("SPINDLE_SAMPLE_BYTES_MAX") {
            self.sample_bytes_max = v.trim().parse().map_err(|_| {
                Error::Config(format!("SPINDLE_SAMPLE_BYTES_MAX={v:?} is not a number"))
            })?;
        }
        if let Some(v) = var("SPINDLE_LARGE_WINDOW_MESSAGES") {
            self.large_window_messages = v.trim().parse().map_err(|_| {
                Error::Config(format!(
                    "SPINDLE_LARGE_WINDOW_MESSAGES={v:?} is not a number"
                ))
            })?;
        }
        if let Some(v) = var("SPINDLE_ATOMIC_ORDERING") {
            self.atomic_ordering = v
                .parse()
                .map_err(|e| Error::Config(format!("SPINDLE_ATOMIC_ORDERING={e}")))?;
        }
        let big = |k: &str, v: String| -> Result<u64> {
            v.trim()
                .parse()
                .map_err(|_| Error::Config(format!("{k}={v:?} is not a number")))
        };
        if let Some(v) = var("SPINDLE_DARE_HEARTBEAT_US") {
            self.dare.heartbeat_us = big("SPINDLE_DARE_HEARTBEAT_US", v)?;
        }
        if let Some(v) = var("SPINDLE_DARE_ELECTION_TIMEOUT_US") {
            self.dare.election_timeout_us = big("SPINDLE_DARE_ELECTION_TIMEOUT_US", v)?;
        }
        if let Some(v) = var("SPINDLE_DARE_LOG_ENTRIES") {
            self.dare.log_entries = num("SPINDLE_DARE_LOG_ENTRIES", v)? as usize;
        }
        if let Some(v) = var("SPINDLE_DARE_SENDER_WINDOW") {
            self.dare.sender_window = num("SPINDLE_DARE_SENDER_WINDOW", v)? as usize;
        }
        if let Some(v) = var("SPINDLE_LISTEN") {
            self.listen = v;
        }
        if let Some(v) = var("SPINDLE_BOOTSTRAP") {
            self.bootstrap = v
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| num("SPINDLE_BOOTSTRAP", s.to_string()))
                .collect::<Result<_>>()?;
        }
        if let Some(v) = var("SPINDLE_SPIN_BEFORE_PARK_US") {
            self.spin_before_park_us = big("SPINDLE_SPIN_BEFORE_PARK_US", v)?;
        }
        if let Some(v) = var("SPINDLE_BUSY_YIELD_US") {
            self.busy_yield_us = big("SPINDLE_BUSY_YIELD_US", v)?;
        }
        if let Some(v) = var("SPINDLE_PREDICATE_CPUS") {
            self.predicate_cpus = v
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| big("SPINDLE_PREDICATE_CPUS", s.to_string()).map(|c| c as usize))
                .collect::<Result<_>>()?;
        }
        if let Some(v) = var("SPINDLE_PREDICATE_FIFO_PRIORITY") {
            let p = big("SPINDLE_PREDICATE_FIFO_PRIORITY", v)?;
            self.predicate_fifo_priority = u8::try_from(p).map_err(|_| {
                Error::Config(format!(
                    "SPINDLE_PREDICATE_FIFO_PRIORITY={p}: at most {}",
                    spindle_group::sched::FIFO_PRIORITY_MAX
                ))
            })?;
        }
        match (
            var("SPINDLE_DOMAIN_SECRET"),
            var("SPINDLE_DOMAIN_SECRET_FILE"),
        ) {
            (Some(_), Some(_)) => {
                return Err(Error::Config(
                    "SPINDLE_DOMAIN_SECRET and SPINDLE_DOMAIN_SECRET_FILE: set one, not both"
                        .into(),
                ))
            }
            // The error names the variable and the length rule, never the value.
            (Some(v), None) => {
                self.fabric.domain_secret = Some(
                    DomainSecret::new(v.as_bytes())
                        .map_err(|e| Error::Config(format!("SPINDLE_DOMAIN_SECRET: {e}")))?,
                )
            }
            (None, Some(path)) => {
                self.fabric.domain_secret = Some(
                    DomainSecret::from_file(Path::new(&path))
                        .map_err(|e| Error::Config(format!("SPINDLE_DOMAIN_SECRET_FILE: {e}")))?,
                )
            }
            (None, None) => {}
        }
        if let Some(v) = var("SPINDLE_ENCRYPT_LINKS") {
            self.fabric.encrypt_links = match v.trim() {
                "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(Error::Config(format!(
                        "SPINDLE_ENCRYPT_LINKS={other:?}: expected true or false"
                    )))
                }
            };
        }
        if let Some(v) = var("SPINDLE_REJOIN") {
            self.rejoin = match v.trim() {
                "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(Error::Config(format!(
                        "SPINDLE_REJOIN={other:?}: expected true or false"
                    )))
                }
            };
        }
        if let Some(v) = var("SPINDLE_DATA_DIR") {
            self.data_dir = (!v.trim().is_empty()).then(|| PathBuf::from(v.trim()));
        }
        if let Some(v) = var("SPINDLE_CONTACTS") {
            let mut contacts = Vec::new();
            for e in v.split(',').filter(|s| !s.trim().is_empty()) {
                let (n, a) = e.split_once('=').ok_or_else(|| {
                    Error::Config(format!("SPINDLE_CONTACTS entry {e:?}: expected id=address"))
                })?;
                contacts.push(Contact {
                    node: num("SPINDLE_CONTACTS", n.to_string())?,
                    address: a.trim().to_string(),
                });
            }
            self.contacts = contacts;
        }
        Ok(())
    }

    /// Checks the settings; the error names the key and `origin`.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let bad = |what: String| Err(Error::Config(format!("{origin}: {what}")));
        if self.listen.is_empty() {
            return bad("listen: must not be empty".into());
        }
        if self.window_slots == 0 || self.window_slots > spindle_group::layout::WINDOW_SLOTS_MAX {
            return bad(format!(
                "window_slots = {}: must be 1..={}",
                self.window_slots,
                spindle_group::layout::WINDOW_SLOTS_MAX
            ));
        }
        if self.slot_payload_bytes == 0 || self.slot_payload_bytes > 64 * 1024 {
            return bad(format!(
                "slot_payload_bytes = {}: must be 1..=65536",
                self.slot_payload_bytes
            ));
        }
        if self.sample_bytes_max > SAMPLE_BYTES_MAX_LIMIT {
            return bad(format!(
                "sample_bytes_max = {}: at most {SAMPLE_BYTES_MAX_LIMIT} (256 MiB)",
                self.sample_bytes_max
            ));
        }
        let large_max = crate::declare::LARGE_WINDOW_MESSAGES_MAX;
        if !(1..=large_max).contains(&self.large_window_messages) {
            return bad(format!(
                "large_window_messages = {}: must be 1..={large_max}",
                self.large_window_messages
            ));
        }
        if self.topic_subgroups == 0 || self.topic_subgroups > TOPIC_SUBGROUPS_MAX {
            return bad(format!(
                "topic_subgroups = {}: must be 1..={TOPIC_SUBGROUPS_MAX}",
                self.topic_subgroups
            ));
        }
        let dare_max = spindle_group::layout::DARE_SUBGROUPS_MAX;
        if self.atomic_ordering == AtomicOrdering::Dare && self.topic_subgroups as usize > dare_max
        {
            return bad(format!(
                "atomic_ordering = \"dare\" with topic_subgroups = {}: a domain runs at most \
                 {dare_max} DARE subgroups; lower topic_subgroups",
                self.topic_subgroups
            ));
        }
        if let Err(e) = check_dare_settings(&self.dare) {
            return bad(format!("[dare] {e}"));
        }
        if let Err(e) = self.fabric.validate() {
            let why = match e {
                spindle_transport_rdma::Error::Config(why) => why,
                other => other.to_string(),
            };
            return bad(format!("[fabric] {why}"));
        }
        if self.spin_before_park_us > SPIN_BEFORE_PARK_US_MAX {
            return bad(format!(
                "spin_before_park_us = {}: at most {SPIN_BEFORE_PARK_US_MAX}",
                self.spin_before_park_us
            ));
        }
        if self.busy_yield_us > BUSY_YIELD_US_MAX {
            return bad(format!(
                "busy_yield_us = {}: at most {BUSY_YIELD_US_MAX} (0: never)",
                self.busy_yield_us
            ));
        }
        if let Err(e) = self.thread_sched() {
            return bad(match e {
                Error::Config(why) => why,
                other => other.to_string(),
            });
        }
        if self
            .data_dir
            .as_ref()
            .is_some_and(|d| d.as_os_str().is_empty())
        {
            return bad("data_dir: must not be empty (leave it out for no logs)".into());
        }
        self.metrics.validate(origin)?;
        validate_transport(self, origin)?;
        if self.rejoin && self.data_dir.is_some() {
            return bad(
                "rejoin = true with a data_dir: a participant with logged topics cannot rejoin \
                 (yet); leave rejoin out and restart the process instead"
                    .into(),
            );
        }
        if let Some(twice) = self
            .bootstrap
            .iter()
            .enumerate()
            .find_map(|(i, b)| self.bootstrap[..i].contains(b).then_some(*b))
        {
            return bad(format!(
                "bootstrap = {:?}: node {twice} is listed twice",
                self.bootstrap
            ));
        }
        if self.entity_timeout_ms == 0 {
            return bad("entity_timeout_ms = 0: must be at least 1".into());
        }
        if !self.bootstrap.is_empty() && self.bootstrap.contains(&self.node_id) {
            for b in self.bootstrap.iter().filter(|b| **b != self.node_id) {
                if !self.contacts.iter().any(|c| c.node == *b) {
                    return bad(format!("bootstrap member {b} has no entry in contacts"));
                }
            }
        } else if self.contacts.iter().all(|c| c.node == self.node_id) {
            let me = self.node_id;
            return bad(if self.contacts.is_empty() {
                format!(
                    "node {me} is not in bootstrap {:?} and has no contact to join through",
                    self.bootstrap
                )
            } else {
                format!(
                    "node {me} is not in bootstrap {:?} and its only contact is itself: a \
                     joiner needs another member's address (or bootstrap = [{me}] to start \
                     the domain)",
                    self.bootstrap
                )
            });
        }
        Ok(())
    }
}

/// Checks the transport's own keys: `provider` only with libfabric, `device` only with
/// verbs, and the side channel's `listen` a `host:port`; the error names the key.
fn validate_transport(cfg: &ParticipantConfig, origin: &str) -> Result<()> {
    let bad = |what: String| Err(Error::Config(format!("{origin}: {what}")));
    if cfg.provider.is_some() && cfg.transport != Transport::Libfabric {
        return bad(format!(
            "provider = {:?}: only for transport = \"libfabric\" (this is {:?})",
            cfg.provider.as_deref().unwrap_or_default(),
            cfg.transport.name()
        ));
    }
    if cfg.device.is_some() && cfg.transport != Transport::Verbs {
        return bad(format!(
            "device = {:?}: only for transport = \"verbs\" (this is {:?})",
            cfg.device.as_deref().unwrap_or_default(),
            cfg.transport.name()
        ));
    }
    if cfg.device.as_deref() == Some("") {
        return bad("device: must not be empty (leave it out for the first device)".into());
    }
    if cfg.transport != Transport::Shm
        && cfg
            .listen
            .rsplit_once(':')
            .is_none_or(|(host, p)| host.is_empty() || p.parse::<u16>().is_err())
    {
        return bad(format!(
            "listen = {:?}: transport = {:?} listens{} on a host:port, the port 0..=65535 \
             (0: any free one)",
            cfg.listen,
            cfg.transport.name(),
            if cfg.transport == Transport::Tcp {
                ""
            } else {
                " for its side channel"
            }
        ));
    }
    for c in &cfg.contacts {
        validate_contact(cfg, c, origin)?;
    }
    Ok(())
}

/// Checks that a contact's address has the form its transport reaches members at: a
/// `host:port` (tcp, and the side channel of libfabric and verbs), or the abstract socket
/// `@spindle-<namespace>-<node>` of an shm member, ending in that contact's node id. A
/// wrong form would only show as a join that times out.
fn validate_contact(cfg: &ParticipantConfig, c: &Contact, origin: &str) -> Result<()> {
    let a = c.address.as_str();
    let ok = match cfg.transport {
        Transport::Shm => a
            .strip_prefix("@spindle-")
            .and_then(|rest| rest.strip_suffix(&format!("-{}", c.node)))
            .is_some(),
        Transport::Tcp | Transport::Libfabric | Transport::Verbs => a
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok()),
    };
    if ok {
        return Ok(());
    }
    let expected = match cfg.transport {
        Transport::Shm => format!(
            "an shm member listens at \"@spindle-<its listen namespace>-<its node id>\" \
             (node {} in this participant's namespace: {:?})",
            c.node,
            ParticipantConfig::shm_address(&cfg.listen, c.node)
        ),
        _ => "a host:port".to_owned(),
    };
    Err(Error::Config(format!(
        "{origin}: contacts: node {}'s address {a:?} does not fit transport = {:?}: {expected}",
        c.node,
        cfg.transport.name()
    )))
}

#[cfg(test)]
mod tests;
