//! The sans-IO engine of one node: SST, SMC and ordered delivery for a fixed view.
//!
//! The engine owns no thread, socket or clock. It reads its SST regions (local memory the
//! fabric writes into), and each [`Engine::step`] evaluates the three predicates of every
//! subgroup once — send, receive (with null-sends), delivery — and queues what they decide:
//! pushes (one-sided writes of just the changed bytes to just the members that read them),
//! delivery batches and events. A driver takes them out with [`Engine::drain_pushes`],
//! [`Engine::poll_delivery`] and [`Engine::poll_event`]: the runtime does so over a real
//! fabric ([`crate::runtime`]), tests over the simulator.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use spindle_transport_rdma::{NodeId, Region, RegionId};

use crate::error::{Error, Result};
use crate::large::{InPlace, Large};
use crate::layout::{
    sst_region_id, DeliveryMode, Geometry, Layout, SubgroupId, SubgroupSpec, View,
};
pub(crate) use crate::push::drain_queue;
pub use crate::push::{PostBytes, Push, PushBytes};
use crate::smc::{Ring, Sender};

mod dare;
mod delivery;
mod epoch;
mod predicates;

pub use dare::{dare_imm, is_dare_imm, DARE_ENGINE_IMM_TAG, DARE_OUT_QUEUE_MAX};

/// Most messages one receive predicate takes from one sender in one step (batching bound;
/// also what keeps one busy subgroup from starving the others).
pub const RECEIVE_BATCH_MAX: u64 = 1024;
/// Most messages one delivery predicate delivers in one step.
pub const DELIVERY_BATCH_MAX: u64 = 1024;
/// A subgroup's byte budget per predicate and step: the most the send predicate pushes of
/// full slots in one [`Engine::step`], and the most the receive predicate (unordered mode,
/// where it delivers; one budget for all senders) or the delivery predicate copies out of
/// the rings. Each still moves at least one message, whatever its size. A subgroup one
/// of whose predicates stopped at its budget is served after the others in the next step
/// (`Engine::step`), so what a quiet subgroup's message waits behind, per step, is at most
/// a budget or two of each busy subgroup's copies (Spindle III's fairness across
/// subgroups). One 64 KiB slot: a round of the runtime (the step, then the upcalls, which
/// copy what the step delivered once more) then does tens of microseconds of a bulk
/// stream's work between two looks at the other subgroups. With [`DELIVERY_BATCH_MAX`]
/// alone one busy subgroup of 64 KiB messages could copy 64 MiB before the predicate
/// thread turned to the others; 1 MiB held a 1 KiB ping's round trip at about 0.5 ms behind
/// a 65,000-byte stream, 64 KiB at about 60 µs (docs/benchmarks.md, issue 17). A stream of
/// 1 KiB messages measured no slower with it (a full window of 256 slots is four budgets).
pub const DELIVERY_STEP_BYTES_MAX: usize = 64 << 10;
/// Most messages of the node's own ring one send predicate pushes in one step.
pub const SEND_BATCH_MAX: u64 = 1024;
/// Largest single push of ring slots, in bytes (a batch is split into chunks this size,
/// each with its own guard).
pub const PUSH_BYTES_MAX: usize = 1 << 20;
/// Unused bytes of a slot from which a push of a run of slots ends at that slot's message
/// (the next slot starts a push of its own): one more push (a frame over tcp, a copy call
/// over shm) costs about what copying this many idle bytes does, and an application's
/// small samples in the default 4096-byte slots then cross the fabric at their own size
/// (over tcp, 1 KiB samples in 4 KiB slots moved four times their bytes).
pub const PUSH_GAP_BYTES_MIN: usize = 1024;
const _: () = assert!(
    PUSH_GAP_BYTES_MIN >= crate::layout::SLOT_HEADER_BYTES && PUSH_GAP_BYTES_MIN < PUSH_BYTES_MAX,
    "a gap worth a push of its own is more than a header and less than a push"
);
/// Pushes queued and not yet drained above which the send predicate waits (the fabric
/// is behind).
pub const PUSH_QUEUE_MAX: usize = 4096;
/// Delivery batches queued and not yet polled above which delivery waits.
pub const DELIVERY_QUEUE_MAX: usize = 1024;
/// Events queued and not yet polled (further ones are dropped after this many, with the
/// count kept in [`EngineStats::events_dropped`]).
pub const EVENT_QUEUE_MAX: usize = 1024;

/// The Spindle techniques (Spindle III), each switchable so its effect can be measured.
/// [`Techniques::default`] turns them all on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Techniques {
    /// The send predicate pushes every committed slot in one write (two on wrap-around);
    /// off: one write per message.
    pub batch_sends: bool,
    /// The receive predicate takes every new message of a sender; off: one per step.
    pub batch_receives: bool,
    /// The delivery predicate delivers every stable message; off: one per step.
    pub batch_deliveries: bool,
    /// The control row is pushed once per step, just the changed words; off: once per
    /// received and per delivered message.
    pub batch_acks: bool,
    /// The receive predicate sends nulls for this node's turns that precede a received
    /// message (Spindle III-B); atomic mode only.
    pub null_sends: bool,
    /// Application commits never wait for the predicate thread's writes; off: a lock shared
    /// by commits and the posting of writes (Derecho's baseline).
    pub early_lock_release: bool,
    /// One upcall per batch of deliveries; off: one per message.
    pub batched_upcall: bool,
}

impl Default for Techniques {
    fn default() -> Self {
        Techniques::all()
    }
}

impl Techniques {
    /// Every technique on.
    pub fn all() -> Techniques {
        Techniques {
            batch_sends: true,
            batch_receives: true,
            batch_deliveries: true,
            batch_acks: true,
            null_sends: true,
            early_lock_release: true,
            batched_upcall: true,
        }
    }

    /// Every technique off (the baseline the Spindle paper starts from).
    pub fn none() -> Techniques {
        Techniques {
            batch_sends: false,
            batch_receives: false,
            batch_deliveries: false,
            batch_acks: false,
            null_sends: false,
            early_lock_release: false,
            batched_upcall: false,
        }
    }

    /// All four batching techniques set to `on`, the others unchanged.
    pub fn with_batching(mut self, on: bool) -> Techniques {
        self.batch_sends = on;
        self.batch_receives = on;
        self.batch_deliveries = on;
        self.batch_acks = on;
        self
    }
}

/// Engine settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineConfig {
    /// Which Spindle techniques are on.
    pub techniques: Techniques,
}

/// One delivered message, borrowed from its [`DeliveryBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Position in the subgroup's delivery order (round-robin: `seq * senders + rank`).
    pub global_index: u64,
    /// The sender's node id.
    pub sender: NodeId,
    /// The sender's rank among the subgroup's senders.
    pub sender_rank: u32,
    /// The sender's sequence number for this message.
    pub sender_seq: u64,
    /// The payload: the whole message, or its first bytes when this node is one of the
    /// subgroup's [`SubgroupSpec::delivery_prefix`] members.
    pub payload: &'a [u8],
    /// The message's length as sent (`payload.len()` unless a delivery prefix cut it).
    pub full_len: usize,
}

impl Message<'_> {
    /// The message as one line of a delivery log (`--log` of the workloads, now in
    /// `spindle_bench::workload`): `<subgroup> <global_index> <sender_rank> <sender_seq>
    /// <size>`, no newline.
    pub fn log_line(&self, subgroup: SubgroupId) -> String {
        format!(
            "{subgroup} {} {} {} {}",
            self.global_index, self.sender_rank, self.sender_seq, self.full_len
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    global_index: u64,
    sender_rank: u32,
    sender_seq: u64,
    start: usize,
    len: usize,
    full_len: usize,
    /// Index in [`DeliveryBatch::in_place`] of a large message read in place (then
    /// `start` is unused).
    in_place: Option<u32>,
}

/// Messages delivered together in one subgroup, in delivery order (the batched upcall).
///
/// A message that went by RDMC (above the subgroup's slot size) is not copied into the
/// batch: its [`Message::payload`] reads it in place in its receive (or own send) buffer,
/// and the batch **pins** that buffer — no later message of that sender lands in it —
/// until the batch is given back ([`Engine::recycle`]) or dropped. The group runtime
/// gives every batch back when its upcall returns; an application that keeps a batch
/// (see [`crate::runtime::Application::deliver_owned`]) keeps its sender at the RDMC window
/// meanwhile, and should copy large messages out ([`DeliveryBatch::holds_in_place`]
/// says whether there are any) if it keeps them long.
#[derive(Debug, Clone)]
pub struct DeliveryBatch {
    subgroup: SubgroupId,
    senders: Arc<[NodeId]>,
    metas: Vec<Meta>,
    payload: Vec<u8>,
    /// The large messages read in place, each pinning its buffer.
    in_place: Vec<InPlace>,
}

impl DeliveryBatch {
    /// The subgroup.
    pub fn subgroup(&self) -> SubgroupId {
        self.subgroup
    }

    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.metas.len()
    }

    /// True if the batch holds no message.
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// Every copied message's payload, back to back: the [`Message::payload`] of each
    /// message not read in place is a slice of it.
    pub fn bytes(&self) -> &[u8] {
        &self.payload
    }

    /// True if some messages are read in place (large ones), pinning their buffers
    /// while this batch lives.
    pub fn holds_in_place(&self) -> bool {
        !self.in_place.is_empty()
    }

    /// How many messages are read in place.
    pub fn in_place_len(&self) -> usize {
        self.in_place.len()
    }

    /// The bytes of the `i`-th message read in place, in delivery order: the
    /// [`Message::payload`] of such a message is this slice.
    pub fn in_place_bytes(&self, i: usize) -> Option<&[u8]> {
        self.in_place.get(i).map(InPlace::bytes)
    }

    /// Forgets the messages, keeping the buffer the copied ones used (for reuse), and
    /// unpins the buffers of the ones read in place.
    pub fn clear(&mut self) {
        self.metas.clear();
        self.payload.clear();
        self.in_place.clear();
    }

    /// The memory the batch holds for payloads (at least `bytes().len()`).
    pub fn capacity(&self) -> usize {
        self.payload.capacity()
    }

    /// The messages, in delivery order.
    pub fn iter(&self) -> impl Iterator<Item = Message<'_>> + '_ {
        self.metas.iter().map(|m| Message {
            global_index: m.global_index,
            sender: self.senders[m.sender_rank as usize],
            sender_rank: m.sender_rank,
            sender_seq: m.sender_seq,
            payload: match m.in_place {
                Some(i) => self.in_place[i as usize].bytes(),
                None => &self.payload[m.start..m.start + m.len],
            },
            full_len: m.full_len,
        })
    }
}

/// Something the engine reports besides deliveries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineEvent {
    /// A member's bytes in the SST break the protocol (a slot header out of sequence, a
    /// length beyond the slot, a sender running past the window). The subgroup stops
    /// delivering; the next view change removes the member.
    PeerMisbehaved {
        /// The subgroup.
        subgroup: SubgroupId,
        /// The member whose row or ring is wrong: this node itself when its own ring was
        /// rewritten (by a peer that maps its memory; the group then stops this node).
        peer: NodeId,
        /// What is wrong.
        detail: String,
    },
    /// A subgroup stopped sending and delivering because a member failed (it waits for
    /// the next view, a later issue).
    Wedged {
        /// The subgroup.
        subgroup: SubgroupId,
        /// The member that failed.
        peer: NodeId,
    },
}

/// Counters of what the engine did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Calls of [`Engine::step`].
    pub steps: u64,
    /// Pushes queued (writes to post).
    pub pushes: u64,
    /// Application messages delivered.
    pub delivered: u64,
    /// Null messages delivered (skipped, not upcalled).
    pub nulls_delivered: u64,
    /// Null messages this node sent.
    pub nulls_sent: u64,
    /// Delivery batches queued.
    pub delivery_batches: u64,
    /// Events dropped because the event queue was full.
    pub events_dropped: u64,
    /// Times a subgroup's global persistence frontier (the minimum of its members'
    /// `persisted_num`) moved up.
    pub persisted_frontier_moves: u64,
    /// Messages (nulls included) seen stable — received by every member — in atomic
    /// subgroups.
    pub stable: u64,
    /// Steps in which a subgroup stopped at its byte budget ([`DELIVERY_STEP_BYTES_MAX`])
    /// with more to copy (one per subgroup and step).
    pub budget_stops: u64,
}

/// Why a subgroup no longer runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Halt {
    Running,
    Stopped,
}

struct SubgroupState {
    spec: SubgroupSpec,
    geom: Geometry,
    region_id: RegionId,
    region: Region,
    my_rank: usize,
    ring: Option<Arc<Ring>>,
    senders: Arc<[NodeId]>,
    /// Other members: every push goes to each of them.
    peers: Vec<NodeId>,
    /// Messages received from each sender (mirror of this node's `received_num` words).
    received: Vec<u64>,
    /// Messages delivered (atomic: the global count; unordered: the total).
    delivered: u64,
    /// Messages seen stable (atomic mode: the sum over senders of the stability
    /// frontier), for [`EngineStats::stable`].
    stable_seen: u64,
    /// This node's `persisted_num`: messages of the delivery order its log holds durably.
    persisted: u64,
    /// The minimum of every member's `persisted_num` last seen (the global frontier).
    global_persisted: u64,
    /// This node's own ring: committed and pushed frontiers.
    committed: u64,
    pushed: u64,
    /// Words of this node's control row changed since the last push (inclusive range).
    ctrl_dirty: Option<(usize, usize)>,
    /// A delivery batch of this subgroup is open at the back of the queue (this step).
    batch_open: bool,
    /// This step, a predicate of the subgroup stopped at the byte budget
    /// ([`DELIVERY_STEP_BYTES_MAX`]): more waits.
    saturated: bool,
    /// The subgroup was saturated in the step before: this step serves it after the
    /// subgroups that were not.
    deferred: bool,
    /// Per sender rank: how many of its first messages in this view are re-sends this node
    /// already delivered in the previous view (unordered mode; counted, not upcalled).
    skip: Vec<u64>,
    halt: Halt,
    /// The senders' RDMC groups, when the subgroup moves large messages (crate::large).
    large: Option<Large>,
    /// Bytes of each message copied into a delivery batch: the spec's
    /// `delivery_prefix` when it names this node, else `usize::MAX` (whole messages).
    delivery_prefix: usize,
    /// A dare subgroup's core (`engine/dare.rs`); its `geom`, `region` and `ring` are
    /// then the local staging ring of this node's sends, `region_id` the core's control
    /// region.
    dare: Option<dare::DareSub>,
}

/// What a subgroup's state is built from beside its spec ([`SubgroupState::fresh`]): the
/// parts that differ between a Derecho-ordered subgroup and a dare one.
struct SubgroupSlots {
    geom: Geometry,
    region_id: RegionId,
    region: Region,
    my_rank: usize,
    ring: Option<Arc<Ring>>,
    /// Sender lanes counted in `received` and `skip`: one per sender (a dare subgroup's
    /// staging ring has one).
    lanes: usize,
    large: Option<Large>,
    dare: Option<dare::DareSub>,
}

impl SubgroupState {
    /// A subgroup's state at the start of a view: nothing received, delivered, persisted
    /// or pushed yet.
    fn fresh(spec: SubgroupSpec, node: NodeId, slots: SubgroupSlots) -> Self {
        SubgroupState {
            peers: spec
                .members
                .iter()
                .copied()
                .filter(|m| *m != node)
                .collect(),
            senders: spec.senders.clone().into(),
            received: vec![0; slots.lanes],
            delivered: 0,
            stable_seen: 0,
            persisted: 0,
            global_persisted: 0,
            committed: 0,
            pushed: 0,
            ctrl_dirty: None,
            batch_open: false,
            saturated: false,
            deferred: false,
            skip: vec![0; slots.lanes],
            halt: Halt::Running,
            large: slots.large,
            ring: slots.ring,
            my_rank: slots.my_rank,
            delivery_prefix: spec
                .delivery_prefix
                .as_ref()
                .filter(|p| p.members.contains(&node))
                .map_or(usize::MAX, |p| p.bytes),
            region_id: slots.region_id,
            region: slots.region,
            geom: slots.geom,
            dare: slots.dare,
            spec,
        }
    }
}

/// Queues the same range of `s`'s region for every other member of the subgroup.
fn push_to_peers(
    pushes: &mut VecDeque<Push>,
    stats: &mut EngineStats,
    s: &SubgroupState,
    offset: usize,
    len: usize,
    guard: Option<(usize, u64)>,
) {
    for peer in &s.peers {
        pushes.push_back(Push {
            peer: *peer,
            region: s.region_id,
            offset,
            len,
            guard,
        });
        stats.pushes += 1;
    }
}

/// The engine of one node for one view. See the module docs.
pub struct Engine {
    node: NodeId,
    view: View,
    techniques: Techniques,
    subgroups: Vec<SubgroupState>,
    next_start: usize,
    /// Bytes the running predicate of the subgroup being stepped may still copy (see
    /// [`DELIVERY_STEP_BYTES_MAX`]).
    step_budget: usize,
    pushes: VecDeque<Push>,
    deliveries: VecDeque<DeliveryBatch>,
    /// Batches handed back after their upcall ([`Engine::recycle`]), reused so that a
    /// steady stream allocates (and page-faults) nothing; at most [`SPARE_BATCHES_MAX`].
    spare_batches: Vec<DeliveryBatch>,
    /// Subgroups where a delivered batch's pin holds an RDMC buffer a later message
    /// needs ([`Engine::poll_pins_wanted`]); each at most once.
    pins_wanted: VecDeque<SubgroupId>,
    events: VecDeque<EngineEvent>,
    stats: EngineStats,
    post_lock: Option<Arc<Mutex<()>>>,
    wedged: bool,
    /// The delivery predicate's per-sender stability frontier, reused across steps.
    stable_scratch: Vec<u64>,
    /// Distinct peers over all subgroups (fixed for the engine's view): where
    /// [`Engine::drain_pushes`] stops scanning once that many are held.
    peers_total: usize,
}

/// Most delivery batches an engine keeps for reuse: one per subgroup a round may deliver
/// in, for layouts of up to this many subgroups (the DDS layer's topic subgroups and its
/// built-in one fit; with 8, a round of 16 busy subgroups freed half its batches and
/// allocated, grew and page-faulted them again the next round).
pub const SPARE_BATCHES_MAX: usize = 32;
/// Largest payload capacity a kept batch may have (a larger one is freed).
pub const SPARE_BATCH_BYTES_MAX: usize = 4 << 20;
/// Most payload capacity all kept batches may have together.
pub const SPARE_BATCHES_BYTES_MAX: usize = 16 << 20;

/// The state of dare subgroup `spec` (at `index` of the layout, the `ordinal`-th dare
/// subgroup) at `node`: its core over the subgroup's members with the control region
/// registered under the subgroup's SST id of the view, and, for a sender, the local
/// staging ring its application threads fill.
#[allow(clippy::too_many_arguments)]
fn dare_state(
    node: NodeId,
    view: &View,
    index: usize,
    ordinal: usize,
    spec: SubgroupSpec,
    settings: crate::layout::DareSettings,
    post_lock: &Option<Arc<Mutex<()>>>,
    register: &mut impl FnMut(RegionId, usize) -> Result<Region>,
) -> Result<SubgroupState> {
    let staging = SubgroupSpec {
        members: vec![node],
        senders: vec![node],
        rdmc: None,
        delivery_prefix: None,
        ..spec.clone()
    };
    let geom = Geometry::new(&staging)?;
    let region = Region::new_heap(0, geom.region_bytes)?;
    let ctrl_id = sst_region_id(view.vid, index);
    let ctrl = register(
        ctrl_id,
        crate::dare::DareNode::ctrl_region_bytes(spec.members.len()),
    )?;
    let seed = (u64::from(view.vid) << 16) ^ index as u64;
    let core = crate::dare::DareNode::new(
        node,
        spec.members.clone(),
        settings.config(spec.slot_payload_bytes),
        ctrl,
        seed,
    )?
    .with_log_region_base(dare::dare_log_base(ordinal))?;
    let ring = spec.senders.contains(&node).then(|| {
        Arc::new(Ring::new(
            spec.id,
            node,
            region.clone(),
            geom.clone(),
            spec.mode,
            0,
            post_lock.clone(),
        ))
    });
    Ok(SubgroupState::fresh(
        spec,
        node,
        SubgroupSlots {
            geom,
            region_id: ctrl_id,
            region,
            my_rank: 0,
            ring,
            lanes: 1,
            large: None,
            dare: Some(dare::DareSub::new(
                core,
                dare::dare_imm(view.vid, ordinal),
                ctrl_id,
            )),
        },
    ))
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("node", &self.node)
            .field("vid", &self.view.vid)
            .field("subgroups", &self.subgroups.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Engine {
    /// The engine of `node` in `view` with `layout`. `register` allocates each SST region
    /// this node takes part in (the runtime registers it with the fabric; tests may use
    /// [`Region::new_heap`]).
    pub fn new(
        node: NodeId,
        view: View,
        layout: Layout,
        config: EngineConfig,
        mut register: impl FnMut(RegionId, usize) -> Result<Region>,
    ) -> Result<Engine> {
        layout.validate(&view)?;
        if !view.members.contains(&node) {
            return Err(Error::Config(format!(
                "node {node} is not a member of view {}",
                view.vid
            )));
        }
        let techniques = config.techniques;
        let post_lock = (!techniques.early_lock_release).then(|| Arc::new(Mutex::new(())));
        let mut subgroups = Vec::new();
        let mut rdmc_groups = 0;
        let mut dare_ordinal = 0;
        for (index, spec) in layout.subgroups.into_iter().enumerate() {
            let rdmc_first = rdmc_groups;
            rdmc_groups += spec.rdmc.as_ref().map_or(0, |_| spec.senders.len());
            let Some(my_rank) = spec.members.iter().position(|m| *m == node) else {
                dare_ordinal += usize::from(matches!(spec.mode, DeliveryMode::Dare(_)));
                continue;
            };
            if let DeliveryMode::Dare(settings) = spec.mode {
                let ordinal = dare_ordinal;
                dare_ordinal += 1;
                subgroups.push(dare_state(
                    node,
                    &view,
                    index,
                    ordinal,
                    spec,
                    settings,
                    &post_lock,
                    &mut register,
                )?);
                continue;
            }
            let geom = Geometry::new(&spec)?;
            let region_id = sst_region_id(view.vid, index);
            let region = register(region_id, geom.region_bytes)?;
            if region.len() < geom.region_bytes {
                return Err(Error::Config(format!(
                    "region {region_id} has {} bytes, subgroup {} needs {}",
                    region.len(),
                    spec.id,
                    geom.region_bytes
                )));
            }
            // A peer's write outside its own row and ring fails its link where the
            // backend sees it (`Endpoint::enforces_peer_writes`).
            region.limit_peer_writes(geom.peer_writes(&spec, node)?)?;
            let (large, mut large_tx) = match &spec.rdmc {
                Some(c) => {
                    let (l, tx) = Large::new(node, view.vid, &spec, c, rdmc_first, &mut register)?;
                    (Some(l), tx)
                }
                None => (None, None),
            };
            let ring = spec.senders.iter().position(|s| *s == node).map(|rank| {
                let mut ring = Ring::new(
                    spec.id,
                    node,
                    region.clone(),
                    geom.clone(),
                    spec.mode,
                    rank,
                    post_lock.clone(),
                );
                ring.large = large_tx.take();
                Arc::new(ring)
            });
            let lanes = spec.senders.len();
            subgroups.push(SubgroupState::fresh(
                spec,
                node,
                SubgroupSlots {
                    geom,
                    region_id,
                    region,
                    my_rank,
                    ring,
                    lanes,
                    large,
                    dare: None,
                },
            ));
        }
        let peers_total = subgroups
            .iter()
            .flat_map(|s| s.peers.iter())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        Ok(Engine {
            node,
            view,
            techniques,
            peers_total,
            stable_scratch: Vec::new(),
            subgroups,
            next_start: 0,
            step_budget: DELIVERY_STEP_BYTES_MAX,
            pushes: VecDeque::new(),
            deliveries: VecDeque::new(),
            spare_batches: Vec::new(),
            pins_wanted: VecDeque::new(),
            events: VecDeque::new(),
            stats: EngineStats::default(),
            post_lock,
            wedged: false,
        })
    }

    // ----- getters ------------------------------------------------------------------

    /// This node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The view the engine runs in.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// What the engine did so far.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// The subgroups this node is a member of, with their SST region ids and the other
    /// members that write into them (a driver waits until each peer's region is known).
    pub fn regions(&self) -> Vec<(SubgroupId, RegionId, Vec<NodeId>)> {
        let large =
            |s: &SubgroupState| s.large.iter().flat_map(|l| l.regions()).collect::<Vec<_>>();
        self.subgroups
            .iter()
            .flat_map(|s| {
                std::iter::once(s.region_id)
                    .chain(large(s))
                    .map(|r| (s.spec.id, r, s.peers.clone()))
            })
            .collect()
    }

    /// The lock that posting writes must hold when early lock release is off (`None` when
    /// it is on).
    pub fn post_lock(&self) -> Option<Arc<Mutex<()>>> {
        self.post_lock.clone()
    }

    fn state(&self, subgroup: SubgroupId) -> Result<&SubgroupState> {
        Ok(&self.subgroups[self.subgroup_index(subgroup)?])
    }

    /// A handle for sending in `subgroup`.
    pub fn sender(&self, subgroup: SubgroupId) -> Result<Sender> {
        let s = self.state(subgroup)?;
        let ring = s.ring.as_ref().ok_or(Error::NotASender {
            subgroup,
            node: self.node,
        })?;
        Ok(Sender {
            ring: Arc::clone(ring),
        })
    }

    /// Registers `wake` to be called after every commit on this node's rings (the runtime
    /// unparks its predicate thread with it), and when a delivered batch's pin of an RDMC
    /// buffer goes ([`DeliveryBatch`]), which may happen on another thread.
    pub fn set_waker(&mut self, wake: impl Fn() + Send + Sync + Clone + 'static) {
        for s in &mut self.subgroups {
            if let Some(ring) = &s.ring {
                ring.set_waker(Box::new(wake.clone()));
            }
            if let Some(l) = &mut s.large {
                l.set_waker(Arc::new(wake.clone()));
            }
        }
    }

    /// Messages this node has received from sender `sender_rank` of `subgroup`.
    pub fn received_num(&self, subgroup: SubgroupId, sender_rank: usize) -> Result<u64> {
        let s = self.state(subgroup)?;
        s.received
            .get(sender_rank)
            .copied()
            .ok_or(Error::UnknownSubgroup { subgroup })
    }

    /// Messages (nulls included) this node has delivered in `subgroup`.
    pub fn delivered_num(&self, subgroup: SubgroupId) -> Result<u64> {
        Ok(self.state(subgroup)?.delivered)
    }

    /// This node's `persisted_num` in `subgroup`: how many messages of this view's
    /// delivery order (nulls included) its log holds durably. Zero unless the runtime
    /// reports with [`Engine::handle_persisted`] (subgroups without a log).
    pub fn persisted_num(&self, subgroup: SubgroupId) -> Result<u64> {
        Ok(self.state(subgroup)?.persisted)
    }

    /// The global persistence frontier of `subgroup`: the minimum of every member's
    /// `persisted_num` as this node sees it now. Every message of this view whose global
    /// index is below it is durable at every member.
    pub fn global_persisted_num(&self, subgroup: SubgroupId) -> Result<u64> {
        let s = self.state(subgroup)?;
        Ok(Self::min_persisted(s))
    }

    fn min_persisted(s: &SubgroupState) -> u64 {
        (0..s.geom.members)
            .map(|m| {
                if m == s.my_rank {
                    s.persisted
                } else {
                    s.region.load_u64(s.geom.persisted_num(m))
                }
            })
            .min()
            .unwrap_or(0)
    }

    /// True if no push, delivery or event is waiting to be taken out.
    pub fn is_drained(&self) -> bool {
        self.pushes.is_empty() && self.deliveries.is_empty() && self.events.is_empty()
    }

    // ----- inputs -------------------------------------------------------------------

    /// A member failed (the fabric reported it): every subgroup it belongs to wedges —
    /// stops sending and delivering — until the next view (Derecho 3.6, a later issue).
    /// A dare subgroup does not wedge: its core learns of the failure (an election when
    /// the peer led) and runs on until the view change.
    pub fn handle_peer_failed(&mut self, peer: NodeId) {
        self.handle_dare_peer_failed(peer);
        for i in 0..self.subgroups.len() {
            let s = &mut self.subgroups[i];
            if s.halt == Halt::Running && s.peers.contains(&peer) && s.dare.is_none() {
                s.halt = Halt::Stopped;
                if let Some(ring) = &s.ring {
                    ring.stop();
                }
                let subgroup = s.spec.id;
                self.event(EngineEvent::Wedged { subgroup, peer });
            }
        }
    }

    /// The index in `subgroups` of `subgroup`, or [`Error::UnknownSubgroup`].
    fn subgroup_index(&self, subgroup: SubgroupId) -> Result<usize> {
        self.subgroups
            .iter()
            .position(|s| s.spec.id == subgroup)
            .ok_or(Error::UnknownSubgroup { subgroup })
    }

    /// This node's log of `subgroup` is durable through the first `persisted_num` messages
    /// of this view's delivery order (the runtime appended and synced them). Publishes it
    /// in the SST (`persisted_num`, pushed with the next acknowledgements). A lower value
    /// than before is ignored (the frontier only moves up); a value above what this node
    /// delivered is an error (nothing is logged before it is delivered).
    pub fn handle_persisted(&mut self, subgroup: SubgroupId, persisted_num: u64) -> Result<()> {
        let i = self.subgroup_index(subgroup)?;
        let s = &mut self.subgroups[i];
        if persisted_num > s.delivered {
            return Err(Error::Config(format!(
                "subgroup {subgroup}: persisted_num {persisted_num} is above the {} messages \
                 delivered",
                s.delivered
            )));
        }
        if persisted_num <= s.persisted {
            return Ok(());
        }
        s.persisted = persisted_num;
        let word = s.geom.senders + 1;
        s.region
            .store_u64(s.geom.persisted_num(s.my_rank), persisted_num);
        self.note_ctrl(i, word);
        Ok(())
    }

    fn misbehaved(&mut self, i: usize, peer: NodeId, detail: String) {
        let s = &mut self.subgroups[i];
        s.halt = Halt::Stopped;
        if let Some(ring) = &s.ring {
            ring.stop();
        }
        let subgroup = s.spec.id;
        tracing::warn!(node = self.node, subgroup, peer, %detail, "peer broke the protocol");
        self.event(EngineEvent::PeerMisbehaved {
            subgroup,
            peer,
            detail,
        });
    }

    fn event(&mut self, e: EngineEvent) {
        if self.events.len() >= EVENT_QUEUE_MAX {
            self.stats.events_dropped += 1;
        } else {
            self.events.push_back(e);
        }
    }

    // ----- outputs ------------------------------------------------------------------

    /// Posts queued pushes, in order per peer: `post(push, bytes)` gets each push with the
    /// bytes to write, read from this node's region. When `post` fails with
    /// [`spindle_transport_rdma::Error::QueueFull`] that peer's pushes stay queued, in
    /// order, for the next call while other peers' pushes go on (a slow peer or one whose
    /// region is not announced yet holds up only itself); any other error drops that
    /// peer's queued pushes and wedges its subgroups. Returns how many pushes were posted.
    pub fn drain_pushes(
        &mut self,
        post: impl FnMut(&Push, &PushBytes<'_>) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        let post_lock = self.post_lock.clone();
        let held = post_lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|p| p.into_inner()));
        let mut post = post;
        let mut posted = 0;
        for s in &mut self.subgroups {
            if let Some(l) = &mut s.large {
                posted += l.drain(&mut post);
            }
        }
        let subgroups = &self.subgroups;
        let (smc_posted, failed) = drain_queue(
            &mut self.pushes,
            self.peers_total,
            |id| {
                subgroups
                    .iter()
                    .find(|s| s.region_id == id)
                    .map(|s| &s.region)
            },
            post,
        );
        let posted = posted + smc_posted;
        drop(held);
        for peer in failed {
            tracing::debug!(node = self.node, peer, "push failed");
            self.handle_peer_failed(peer);
        }
        posted
    }

    /// The next batch of delivered messages, in delivery order.
    pub fn poll_delivery(&mut self) -> Option<DeliveryBatch> {
        self.deliveries.pop_front()
    }

    /// Gives a delivered batch back once its upcall is done, for a later delivery to
    /// reuse its buffers (bounded by [`SPARE_BATCHES_MAX`] and [`SPARE_BATCH_BYTES_MAX`];
    /// the rest are freed).
    pub fn recycle(&mut self, mut batch: DeliveryBatch) {
        // The large messages' buffers are free for their senders from here on.
        batch.clear();
        let kept: usize = self
            .spare_batches
            .iter()
            .map(|b| b.payload.capacity())
            .sum();
        if self.spare_batches.len() < SPARE_BATCHES_MAX
            && batch.payload.capacity() <= SPARE_BATCH_BYTES_MAX
            && kept + batch.payload.capacity() <= SPARE_BATCHES_BYTES_MAX
        {
            self.spare_batches.push(batch);
        }
    }

    /// A subgroup where a large message waits for a buffer that a delivered batch still
    /// pins (see [`DeliveryBatch`]): the application should give back, or copy out and
    /// drop, what it holds of that subgroup's in-place messages. Asked once per message.
    pub fn poll_pins_wanted(&mut self) -> Option<SubgroupId> {
        self.pins_wanted.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<EngineEvent> {
        self.events.pop_front()
    }
}
