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

use spindle_transport_rdma::{NodeId, Region, RegionId, WORD_BYTES};

use crate::error::{Error, Result};
use crate::large::Large;
use crate::layout::{
    sst_region_id, DeliveryMode, Geometry, Layout, SubgroupId, SubgroupSpec, View, NULL_LEN,
    RDMC_LEN, SLOT_HEADER_BYTES,
};
pub(crate) use crate::push::drain_queue;
pub use crate::push::Push;
use crate::smc::{Ring, Sender};

/// Most messages one receive predicate takes from one sender in one step (batching bound;
/// also what keeps one busy subgroup from starving the others).
pub const RECEIVE_BATCH_MAX: u64 = 1024;
/// Most messages one delivery predicate delivers in one step.
pub const DELIVERY_BATCH_MAX: u64 = 1024;
/// Most bytes one delivery predicate copies out of a subgroup's rings in one step (the
/// receive predicate, in unordered mode, where it delivers), and most bytes of full slots
/// one send predicate pushes in one step: with 64 KiB messages,
/// [`DELIVERY_BATCH_MAX`] alone let one busy subgroup copy up to 64 MiB before the
/// predicate thread turned to the others, and a ping on another subgroup waited
/// milliseconds behind a bulk stream (Spindle III's fairness across subgroups). At least
/// one message is always delivered, whatever its size.
pub const DELIVERY_STEP_BYTES_MAX: usize = 1 << 20;
/// Most messages of the node's own ring one send predicate pushes in one step.
pub const SEND_BATCH_MAX: u64 = 1024;
/// Largest single push of ring slots, in bytes (a batch is split into chunks this size,
/// each with its own guard).
pub const PUSH_BYTES_MAX: usize = 1 << 20;
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
}

/// Messages delivered together in one subgroup, in delivery order (the batched upcall).
#[derive(Debug, Clone)]
pub struct DeliveryBatch {
    subgroup: SubgroupId,
    senders: Arc<[NodeId]>,
    metas: Vec<Meta>,
    payload: Vec<u8>,
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

    /// Every message's payload, back to back: each [`Message::payload`] is a slice of it.
    pub fn bytes(&self) -> &[u8] {
        &self.payload
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
            payload: &self.payload[m.start..m.start + m.len],
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
        /// The member whose row or ring is wrong.
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
    /// Per sender rank: how many of its first messages in this view are re-sends this node
    /// already delivered in the previous view (unordered mode; counted, not upcalled).
    skip: Vec<u64>,
    halt: Halt,
    /// The senders' RDMC groups, when the subgroup moves large messages (crate::large).
    large: Option<Large>,
    /// Bytes of each message copied into a delivery batch: the spec's
    /// `delivery_prefix` when it names this node, else `usize::MAX` (whole messages).
    delivery_prefix: usize,
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
    pushes: VecDeque<Push>,
    deliveries: VecDeque<DeliveryBatch>,
    /// Batches handed back after their upcall ([`Engine::recycle`]), reused so that a
    /// steady stream allocates (and page-faults) nothing; at most [`SPARE_BATCHES_MAX`].
    spare_batches: Vec<DeliveryBatch>,
    events: VecDeque<EngineEvent>,
    stats: EngineStats,
    post_lock: Option<Arc<Mutex<()>>>,
    wedged: bool,
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
        for (index, spec) in layout.subgroups.into_iter().enumerate() {
            let rdmc_first = rdmc_groups;
            rdmc_groups += spec.rdmc.as_ref().map_or(0, |_| spec.senders.len());
            let Some(my_rank) = spec.members.iter().position(|m| *m == node) else {
                continue;
            };
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
            subgroups.push(SubgroupState {
                peers: spec
                    .members
                    .iter()
                    .copied()
                    .filter(|m| *m != node)
                    .collect(),
                senders: spec.senders.clone().into(),
                received: vec![0; spec.senders.len()],
                delivered: 0,
                stable_seen: 0,
                persisted: 0,
                global_persisted: 0,
                committed: 0,
                pushed: 0,
                ctrl_dirty: None,
                batch_open: false,
                skip: vec![0; spec.senders.len()],
                halt: Halt::Running,
                large,
                ring,
                my_rank,
                delivery_prefix: spec
                    .delivery_prefix
                    .as_ref()
                    .filter(|p| p.members.contains(&node))
                    .map_or(usize::MAX, |p| p.bytes),
                region_id,
                region,
                geom,
                spec,
            });
        }
        Ok(Engine {
            node,
            view,
            techniques,
            subgroups,
            next_start: 0,
            pushes: VecDeque::new(),
            deliveries: VecDeque::new(),
            spare_batches: Vec::new(),
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
        self.subgroups
            .iter()
            .find(|s| s.spec.id == subgroup)
            .ok_or(Error::UnknownSubgroup { subgroup })
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
    /// unparks its predicate thread with it).
    pub fn set_waker(&self, wake: impl Fn() + Send + Sync + Clone + 'static) {
        for s in &self.subgroups {
            if let Some(ring) = &s.ring {
                ring.set_waker(Box::new(wake.clone()));
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
    pub fn handle_peer_failed(&mut self, peer: NodeId) {
        for i in 0..self.subgroups.len() {
            let s = &mut self.subgroups[i];
            if s.halt == Halt::Running && s.peers.contains(&peer) {
                s.halt = Halt::Stopped;
                if let Some(ring) = &s.ring {
                    ring.stopped
                        .store(true, std::sync::atomic::Ordering::Release);
                }
                let subgroup = s.spec.id;
                self.event(EngineEvent::Wedged { subgroup, peer });
            }
        }
    }

    /// This node's log of `subgroup` is durable through the first `persisted_num` messages
    /// of this view's delivery order (the runtime appended and synced them). Publishes it
    /// in the SST (`persisted_num`, pushed with the next acknowledgements). A lower value
    /// than before is ignored (the frontier only moves up); a value above what this node
    /// delivered is an error (nothing is logged before it is delivered).
    pub fn handle_persisted(&mut self, subgroup: SubgroupId, persisted_num: u64) -> Result<()> {
        let i = self
            .subgroups
            .iter()
            .position(|s| s.spec.id == subgroup)
            .ok_or(Error::UnknownSubgroup { subgroup })?;
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

    // ----- epoch termination (driven by the group layer, crate::group) -------------

    /// Wedges every subgroup: no more sends, receipts or deliveries in this view (the
    /// first step of epoch termination, Derecho 3.6). The received counters are frozen
    /// from here on ([`Engine::received`]); application sends fail with
    /// [`Error::Wedged`].
    pub fn wedge(&mut self) {
        self.wedged = true;
        for s in &mut self.subgroups {
            s.halt = Halt::Stopped;
            if let Some(ring) = &s.ring {
                ring.stopped
                    .store(true, std::sync::atomic::Ordering::Release);
            }
        }
    }

    /// True once [`Engine::wedge`] ran.
    pub fn is_wedged(&self) -> bool {
        self.wedged
    }

    /// Messages received from each sender of `subgroup` (by sender rank); frozen once the
    /// engine is wedged.
    pub fn received(&self, subgroup: SubgroupId) -> Result<&[u64]> {
        Ok(&self.state(subgroup)?.received)
    }

    /// Delivers, in order, every message of `subgroup` before its ragged trim. `cuts[r]`
    /// is how many messages of sender rank `r` the trim keeps. Atomic mode delivers the
    /// round-robin prefix the cuts allow; unordered mode delivers nothing more (its
    /// messages went up on receipt). The trim comes from a peer's row, so a trim this node
    /// cannot honour is an error, not a panic.
    pub fn deliver_to_trim(&mut self, subgroup: SubgroupId, cuts: &[u64]) -> Result<()> {
        let i = self
            .subgroups
            .iter()
            .position(|s| s.spec.id == subgroup)
            .ok_or(Error::UnknownSubgroup { subgroup })?;
        let s = &self.subgroups[i];
        if cuts.len() != s.geom.senders {
            return Err(Error::Protocol(format!(
                "trim of subgroup {subgroup} has {} cuts for {} senders",
                cuts.len(),
                s.geom.senders
            )));
        }
        if s.spec.mode != DeliveryMode::Atomic {
            return Ok(());
        }
        let n = s.geom.senders as u64;
        let trim = cuts
            .iter()
            .enumerate()
            .map(|(r, c)| c.saturating_mul(n).saturating_add(r as u64))
            .min()
            .unwrap_or(0);
        let mut d = s.delivered;
        while d < trim {
            let s = &self.subgroups[i];
            let rank = (d % n) as usize;
            let k = d / n;
            let slot = s.geom.slot(rank, k);
            if k >= s.received[rank] || s.region.load_u64(slot) != k + 1 {
                return Err(Error::Protocol(format!(
                    "trim of subgroup {subgroup} keeps message {k} of sender rank {rank}, \
                     which this node has not received"
                )));
            }
            self.deliver_one(i, rank, k);
            d += 1;
        }
        self.finish_deliveries(i);
        Ok(())
    }

    /// This node's application messages in `subgroup` from sequence number `cut` on, in
    /// order (nulls left out): what it re-sends in the next view. `None` while an
    /// application thread still holds a loan on the ring (the view change waits for it).
    pub fn messages_past_trim(
        &self,
        subgroup: SubgroupId,
        cut: u64,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let s = self.state(subgroup)?;
        let Some(ring) = &s.ring else {
            return Ok(Some(Vec::new()));
        };
        let reserved = ring.reserved();
        let committed = ring.advance_committed(s.committed, u64::MAX);
        if committed < reserved {
            return Ok(None);
        }
        let rank = ring.sender_rank;
        let first = cut.max(committed.saturating_sub(s.geom.window_slots as u64));
        let mut out = Vec::new();
        for k in first..committed {
            let slot = s.geom.slot(rank, k);
            let len = s.region.load_u64(slot + WORD_BYTES);
            match (len, &s.large) {
                (NULL_LEN, _) => {}
                (RDMC_LEN, Some(l)) => {
                    let mut bytes = vec![0; Large::size(&s.region, &s.geom, rank, k)];
                    l.peek(&s.region, &s.geom, rank, k, &mut bytes)?;
                    out.push(bytes);
                }
                _ => out.push(s.region.to_vec(slot + SLOT_HEADER_BYTES, len as usize)?),
            }
        }
        Ok(Some(out))
    }

    /// How many of sender rank `rank`'s messages in `subgroup`, from sequence number
    /// `from` on, this node already holds for the application: application messages
    /// (nulls left out) it received, plus re-sends it delivered in an earlier view and has
    /// not received here yet (see [`Engine::skip_resent`]). After a trim at `from`, this
    /// is how many of the sender's re-sends in the next view this node must skip.
    pub fn messages_held_from(&self, subgroup: SubgroupId, rank: usize, from: u64) -> Result<u64> {
        let s = self.state(subgroup)?;
        let received = *s
            .received
            .get(rank)
            .ok_or(Error::UnknownSubgroup { subgroup })?;
        let first = from.max(received.saturating_sub(s.geom.window_slots as u64));
        let app = (first..received)
            .filter(|k| s.region.load_u64(s.geom.slot(rank, *k) + WORD_BYTES) != NULL_LEN)
            .count() as u64;
        // Re-sends are never nulls, so the skipped ones not received yet count whole.
        Ok(app + s.skip[rank].saturating_sub(received))
    }

    /// The first `count` messages of `sender` in `subgroup` in this view are re-sends
    /// this node already delivered in the previous view: they count as received and
    /// delivered but are not handed up again (unordered mode; atomic mode never needs it,
    /// nothing past the trim was delivered anywhere).
    pub fn skip_resent(&mut self, subgroup: SubgroupId, sender: NodeId, count: u64) -> Result<()> {
        let i = self
            .subgroups
            .iter()
            .position(|s| s.spec.id == subgroup)
            .ok_or(Error::UnknownSubgroup { subgroup })?;
        let s = &mut self.subgroups[i];
        if let Some(rank) = s.senders.iter().position(|x| *x == sender) {
            s.skip[rank] = count;
        }
        Ok(())
    }

    // ----- the predicates -----------------------------------------------------------

    /// Evaluates every subgroup's predicates once, starting from a different subgroup each
    /// time (fairness). Returns true if anything happened (a driver spins while it does).
    pub fn step(&mut self) -> bool {
        self.stats.steps += 1;
        let n = self.subgroups.len();
        if n == 0 {
            return false;
        }
        let start = self.next_start;
        self.next_start = (start + 1) % n;
        let mut work = false;
        for j in 0..n {
            work |= self.step_subgroup((start + j) % n);
        }
        work
    }

    fn step_subgroup(&mut self, i: usize) -> bool {
        if self.subgroups[i].halt != Halt::Running {
            return false;
        }
        let mut work = self.send_predicate(i);
        match self.step_large(i) {
            Ok(w) => work |= w,
            Err((peer, detail)) => {
                self.misbehaved(i, peer, detail);
                return true;
            }
        }
        let received = match self.receive_predicate(i) {
            Ok(r) => r,
            Err((peer, detail)) => {
                self.misbehaved(i, peer, detail);
                return true;
            }
        };
        work |= received;
        if self.null_send(i) {
            work = true;
            self.send_predicate(i);
        }
        match self.delivery_predicate(i) {
            Ok(delivered) => work |= delivered,
            Err((peer, detail)) => {
                self.misbehaved(i, peer, detail);
                return true;
            }
        }
        work |= self.flush_ctrl(i);
        self.track_persisted(i);
        work
    }

    /// Runs the subgroup's RDMC groups (crate::large) and frees the send buffers of own
    /// messages every member consumed (the rule that frees a slot, `Ring::refresh_limit`).
    fn step_large(&mut self, i: usize) -> std::result::Result<bool, (NodeId, String)> {
        let s = &mut self.subgroups[i];
        let Some(l) = &mut s.large else {
            return Ok(false);
        };
        let work = l.step()?;
        if let Some(ring) = &s.ring {
            let (g, region, rank) = (&s.geom, &s.region, ring.sender_rank);
            let consumed = |k: u64| {
                (0..g.members).all(|m| match s.spec.mode {
                    DeliveryMode::Atomic => {
                        g.messages_before(rank, region.load_u64(g.delivered_num(m))) > k
                    }
                    DeliveryMode::Unordered => region.load_u64(g.received_num(m, rank)) > k,
                })
            };
            if let (Some(freed), Some(tx)) = (l.free_own(consumed), &ring.large) {
                tx.freed.store(freed, std::sync::atomic::Ordering::Release);
            }
        }
        Ok(work)
    }

    /// Notes a move of the subgroup's global persistence frontier (a counter; the runtime
    /// reads the frontier with [`Engine::global_persisted_num`]).
    fn track_persisted(&mut self, i: usize) {
        let s = &mut self.subgroups[i];
        if s.persisted == 0 {
            return; // no log here, or nothing durable yet: the minimum cannot move
        }
        let global = Self::min_persisted(s);
        if global > s.global_persisted {
            // Invariant: the minimum includes this node's own frontier, so a peer's word,
            // whatever its bytes, never lifts it above what this node made durable.
            assert!(
                global <= s.persisted,
                "the minimum exceeds this node's own frontier"
            );
            s.global_persisted = global;
            self.stats.persisted_frontier_moves += 1;
        }
    }

    /// Send predicate: advance over committed slots of this node's ring and push them.
    fn send_predicate(&mut self, i: usize) -> bool {
        let batch = self.techniques.batch_sends;
        if self.pushes.len() >= PUSH_QUEUE_MAX {
            return false;
        }
        let s = &mut self.subgroups[i];
        let Some(ring) = s.ring.clone() else {
            return false;
        };
        // At most a step's worth of bytes of full slots (and at least one message): a
        // ring of 64 KiB slots pushes 16 per step, so other subgroups' sends (a ping
        // beside a bulk stream) wait for 1 MiB, not 64 MiB, of copies.
        let send_max = SEND_BATCH_MAX
            .min((DELIVERY_STEP_BYTES_MAX / s.geom.slot_payload_bytes.max(1)).max(1) as u64);
        let committed = ring.advance_committed(s.committed, send_max);
        if committed == s.committed && s.pushed == committed {
            return false;
        }
        let rank = ring.sender_rank;
        if committed > s.committed {
            let old = s.committed;
            if let Some(l) = &mut s.large {
                for k in old..committed {
                    if s.region.load_u64(s.geom.slot(rank, k) + WORD_BYTES) == RDMC_LEN {
                        l.on_commit(&s.region, &s.geom, k);
                    }
                }
            }
            s.committed = committed;
            // Own messages count as received at commit.
            s.received[rank] = committed;
            let my_rank = s.my_rank;
            s.region
                .store_u64(s.geom.received_num(my_rank, rank), committed);
            self.note_ctrl(i, rank);
            if self.subgroups[i].spec.mode == DeliveryMode::Unordered {
                for k in old..committed {
                    self.deliver_one(i, rank, k);
                }
                self.finish_deliveries(i);
            }
        }
        let s = &mut self.subgroups[i];
        let w = s.geom.window_slots as u64;
        let slots_per_chunk = if batch {
            (PUSH_BYTES_MAX / s.geom.slot_bytes).max(1) as u64
        } else {
            1
        };
        while s.pushed < s.committed {
            let first = s.pushed;
            let wrap = w - first % w;
            let n = (s.committed - first).min(wrap).min(slots_per_chunk);
            let last = first + n - 1;
            let offset = s.geom.slot(rank, first);
            // The last slot is pushed only up to its payload's end.
            let last_len = s.region.load_u64(s.geom.slot(rank, last) + WORD_BYTES);
            let last_payload = match last_len {
                NULL_LEN => 0,
                RDMC_LEN => crate::layout::RDMC_ANNOUNCE_BYTES,
                _ => spindle_transport_rdma::round_up_to_words(last_len as usize),
            };
            let len = (n as usize - 1) * s.geom.slot_bytes + SLOT_HEADER_BYTES + last_payload;
            let guard = Some((s.geom.ring(rank), first + n));
            push_to_peers(&mut self.pushes, &mut self.stats, s, offset, len, guard);
            s.pushed = first + n;
        }
        true
    }

    /// Receive predicate: take new messages from every other sender's ring. Returns
    /// whether any arrived; `Err` names a member whose ring breaks the protocol.
    fn receive_predicate(&mut self, i: usize) -> std::result::Result<bool, (NodeId, String)> {
        let batch = if self.techniques.batch_receives {
            RECEIVE_BATCH_MAX
        } else {
            1
        };
        let mode = self.subgroups[i].spec.mode;
        let own = self.subgroups[i].ring.as_ref().map(|r| r.sender_rank);
        let senders = self.subgroups[i].geom.senders;
        let mut any = false;
        for rank in 0..senders {
            if Some(rank) == own {
                continue;
            }
            let s = &self.subgroups[i];
            let g = &s.geom;
            let sender = s.senders[rank];
            let published = s.region.load_u64(g.ring(rank));
            let have = s.received[rank];
            if published <= have {
                continue;
            }
            let consumed = match mode {
                DeliveryMode::Atomic => g.messages_before(rank, s.delivered),
                DeliveryMode::Unordered => have,
            };
            if published > consumed + g.window_slots as u64 {
                return Err((
                    sender,
                    format!(
                        "published {published} messages with only {consumed} consumed here \
                         and a window of {}",
                        g.window_slots
                    ),
                ));
            }
            let mut upto = published.min(have + batch);
            let s = &mut self.subgroups[i];
            let g = &s.geom;
            // Unordered mode delivers what it receives: the step's byte bound applies here.
            let mut step_bytes = 0;
            for k in have..upto {
                let slot = g.slot(rank, k);
                let tag = s.region.load_u64(slot);
                if tag != k + 1 {
                    return Err((sender, format!("slot of message {k} is tagged {tag}")));
                }
                let len = s.region.load_u64(slot + WORD_BYTES);
                if let (RDMC_LEN, Some(l)) = (len, &mut s.large) {
                    // Received only once its RDMC transfer completed here (Derecho §3.6).
                    if !l.receive(&s.region, g, rank, k).map_err(|e| (sender, e))? {
                        upto = k;
                        break;
                    }
                } else if len != NULL_LEN && len > g.slot_payload_bytes as u64 {
                    return Err((
                        sender,
                        format!(
                            "message {k} claims {len} bytes, the slot holds {}",
                            g.slot_payload_bytes
                        ),
                    ));
                }
                if mode == DeliveryMode::Unordered {
                    let size = match (len, &s.large) {
                        (RDMC_LEN, Some(_)) => Large::size(&s.region, g, rank, k),
                        (NULL_LEN, _) => 0,
                        _ => len as usize,
                    };
                    step_bytes += size.min(s.delivery_prefix);
                    if step_bytes >= DELIVERY_STEP_BYTES_MAX {
                        upto = k + 1;
                        break;
                    }
                }
            }
            if upto == have {
                continue;
            }
            if mode == DeliveryMode::Unordered {
                for k in have..upto {
                    self.deliver_one(i, rank, k);
                }
            }
            let s = &mut self.subgroups[i];
            s.received[rank] = upto;
            let my_rank = s.my_rank;
            s.region.store_u64(s.geom.received_num(my_rank, rank), upto);
            any = true;
            if self.techniques.batch_acks {
                self.note_ctrl(i, rank);
            } else {
                for _ in have..upto {
                    self.note_ctrl(i, rank);
                }
            }
        }
        if mode == DeliveryMode::Unordered {
            self.finish_deliveries(i);
        }
        Ok(any)
    }

    /// Null-send (Spindle III-B): if this node's next turn precedes a message it has
    /// received, fill its turns up to that message with nulls — unless an application
    /// message of its own is being built or waits to be pushed (an active sender fills its
    /// turns itself; a null would only push its message a round later). Evaluated from
    /// the received counters every step, so a turn skipped while the application was busy
    /// is filled once it is idle, and nothing is sent once every sender is caught up
    /// (quiescence). Returns true if it sent any.
    fn null_send(&mut self, i: usize) -> bool {
        let s = &self.subgroups[i];
        if !self.techniques.null_sends || s.spec.mode != DeliveryMode::Atomic {
            return false;
        }
        let Some(ring) = &s.ring else {
            return false;
        };
        let me = ring.sender_rank;
        let Some(highest) = (0..s.geom.senders)
            .filter(|r| *r != me && s.received[*r] > 0)
            .map(|r| s.geom.global_index(r, s.received[r] - 1))
            .max()
        else {
            return false;
        };
        let target = s.geom.messages_before(me, highest);
        let have = ring.reserved();
        if target <= have || have > s.committed {
            return false;
        }
        let sent = ring.reserve_nulls(target - have);
        self.stats.nulls_sent += sent;
        sent > 0
    }

    /// Delivery predicate (atomic mode): deliver, in round-robin order, every message all
    /// members have received.
    fn delivery_predicate(&mut self, i: usize) -> std::result::Result<bool, (NodeId, String)> {
        let s = &self.subgroups[i];
        if s.spec.mode != DeliveryMode::Atomic {
            return Ok(false);
        }
        let g = &s.geom;
        let senders = g.senders as u64;
        // Stability: the minimum over members of received_num, per sender.
        let mut stable = s.received.clone();
        for m in (0..g.members).filter(|m| *m != s.my_rank) {
            for (rank, v) in stable.iter_mut().enumerate() {
                *v = (*v).min(s.region.load_u64(g.received_num(m, rank)));
            }
        }
        let stable_total: u64 = stable.iter().sum();
        let s = &mut self.subgroups[i];
        if stable_total > s.stable_seen {
            self.stats.stable += stable_total - s.stable_seen;
            s.stable_seen = stable_total;
        }
        let s = &self.subgroups[i];
        let bound = if self.techniques.batch_deliveries {
            DELIVERY_BATCH_MAX
        } else {
            1
        };
        if self.deliveries.len() >= DELIVERY_QUEUE_MAX {
            return Ok(false);
        }
        let start = s.delivered;
        let mut d = start;
        let mut copied = 0;
        while d - start < bound {
            let rank = (d % senders) as usize;
            let k = d / senders;
            if k >= stable[rank] {
                break;
            }
            // Invariant: a message is delivered only after this node received it (its own
            // received_num is part of the minimum).
            assert!(
                k < self.subgroups[i].received[rank],
                "delivering message {k} of sender {rank} before receiving it"
            );
            let slot = self.subgroups[i].geom.slot(rank, k);
            let len = self.subgroups[i].region.load_u64(slot + WORD_BYTES);
            let large = len == RDMC_LEN && self.subgroups[i].large.is_some();
            if len != NULL_LEN && !large && len > self.subgroups[i].geom.slot_payload_bytes as u64 {
                let sender = self.subgroups[i].senders[rank];
                return Err((
                    sender,
                    format!("message {k} was overwritten before delivery"),
                ));
            }
            copied += self.deliver_one(i, rank, k);
            d += 1;
            if !self.techniques.batch_acks {
                // One ack per delivered message (the unbatched baseline).
                self.finish_deliveries(i);
            }
            if copied >= DELIVERY_STEP_BYTES_MAX {
                break;
            }
        }
        if d == start {
            return Ok(false);
        }
        self.finish_deliveries(i);
        Ok(true)
    }

    /// Appends message `k` of sender `rank` to the subgroup's open delivery batch; returns
    /// the bytes copied (0 for a null or a re-send already delivered).
    fn deliver_one(&mut self, i: usize, rank: usize, k: u64) -> usize {
        let s = &mut self.subgroups[i];
        let slot = s.geom.slot(rank, k);
        let mut len = s.region.load_u64(slot + WORD_BYTES);
        s.delivered += 1;
        let large = if let (RDMC_LEN, Some(l)) = (len, &mut s.large) {
            len = Large::size(&s.region, &s.geom, rank, k) as u64;
            Some(l)
        } else {
            None
        };
        if k < s.skip[rank] {
            // A re-send of a message this node delivered in the previous view.
            if let Some(l) = large {
                let _ = l.take(&s.region, &s.geom, rank, k, None);
            }
            return 0;
        }
        if len == NULL_LEN {
            self.stats.nulls_delivered += 1;
            return 0;
        }
        self.stats.delivered += 1;
        let global_index = s.geom.global_index(rank, k);
        let len = len as usize;
        if !(self.techniques.batched_upcall && s.batch_open) {
            let batch = match self.spare_batches.pop() {
                Some(mut b) => {
                    b.subgroup = s.spec.id;
                    b.senders = Arc::clone(&s.senders);
                    b.metas.clear();
                    b.payload.clear();
                    b
                }
                None => DeliveryBatch {
                    subgroup: s.spec.id,
                    senders: Arc::clone(&s.senders),
                    metas: Vec::new(),
                    payload: Vec::new(),
                },
            };
            self.deliveries.push_back(batch);
            s.batch_open = true;
            self.stats.delivery_batches += 1;
        }
        let batch = self
            .deliveries
            .back_mut()
            .expect("a batch was just ensured");
        let start = batch.payload.len();
        // The length was checked against the slot (or the RDMC transfer) at receipt and
        // before delivery; a delivery prefix copies only the message's first bytes.
        let full_len = len;
        let len = len.min(s.delivery_prefix);
        let read = match large {
            // Appended without zero-filling first: one copy per delivered byte.
            Some(l) => l.take(&s.region, &s.geom, rank, k, Some((&mut batch.payload, len))),
            None => s
                .region
                .read_append(slot + SLOT_HEADER_BYTES, len, &mut batch.payload)
                .map_err(Error::from),
        };
        if read.is_err() {
            batch.payload.truncate(start);
            return 0;
        }
        batch.metas.push(Meta {
            global_index,
            sender_rank: rank as u32,
            sender_seq: k,
            start,
            len,
            full_len,
        });
        len
    }

    /// Closes this step's delivery batch and records the delivered count in the row.
    fn finish_deliveries(&mut self, i: usize) {
        let s = &mut self.subgroups[i];
        s.batch_open = false;
        let word = s.geom.senders;
        let my_rank = s.my_rank;
        let d = s.delivered;
        if s.region.load_u64(s.geom.delivered_num(my_rank)) != d {
            s.region.store_u64(s.geom.delivered_num(my_rank), d);
            self.note_ctrl(i, word);
        }
    }

    /// Word `word` of this node's control row changed: push it now (acks unbatched) or
    /// at the end of the step (batched).
    fn note_ctrl(&mut self, i: usize, word: usize) {
        let s = &mut self.subgroups[i];
        s.ctrl_dirty = Some(match s.ctrl_dirty {
            None => (word, word),
            Some((lo, hi)) => (lo.min(word), hi.max(word)),
        });
        if !self.techniques.batch_acks {
            self.flush_ctrl(i);
        }
    }

    /// Pushes the changed words of this node's control row to the other members.
    fn flush_ctrl(&mut self, i: usize) -> bool {
        let s = &mut self.subgroups[i];
        let Some((lo, hi)) = s.ctrl_dirty.take() else {
            return false;
        };
        let offset = s.geom.ctrl_row(s.my_rank) + lo * WORD_BYTES;
        let len = (hi - lo + 1) * WORD_BYTES;
        push_to_peers(&mut self.pushes, &mut self.stats, s, offset, len, None);
        true
    }

    fn misbehaved(&mut self, i: usize, peer: NodeId, detail: String) {
        let s = &mut self.subgroups[i];
        s.halt = Halt::Stopped;
        if let Some(ring) = &s.ring {
            ring.stopped
                .store(true, std::sync::atomic::Ordering::Release);
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
        scratch: &mut Vec<u8>,
        post: impl FnMut(&Push, &[u8]) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        let post_lock = self.post_lock.clone();
        let held = post_lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|p| p.into_inner()));
        let mut post = post;
        let mut posted = 0;
        for s in &mut self.subgroups {
            if let Some(l) = &mut s.large {
                posted += l.drain(scratch, &mut post);
            }
        }
        let subgroups = &self.subgroups;
        let peers_total = subgroups
            .iter()
            .flat_map(|s| s.peers.iter())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let (smc_posted, failed) = drain_queue(
            &mut self.pushes,
            scratch,
            peers_total,
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
    pub fn recycle(&mut self, batch: DeliveryBatch) {
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

    /// The next event.
    pub fn poll_event(&mut self) -> Option<EngineEvent> {
        self.events.pop_front()
    }
}
