//! The group: one node's engine and membership across views — joins, leaves, failures,
//! view changes with ragged trim, re-sends, state transfer (Derecho 3.5, 3.6, App. B).
//!
//! A [`Group`] holds the current view's [`Engine`] and [`Membership`]. Each
//! [`Group::handle_time`] runs both, and when the membership decides
//! on a trim it delivers up to the trim, computes the next view and its layout (the same
//! deterministic [`LayoutFn`] on every member), registers the new view's regions, and
//! re-sends in the new view, in sender order, this node's messages the trim cut off.
//! Outputs come out, in order, from [`Group::poll`]: deliveries, installed views, requests
//! for a snapshot of a subgroup's state (for a joiner) and states to install.
//!
//! Like the engine, the group is sans-IO: it owns no thread, socket or clock. The caller
//! feeds it the fabric's events ([`Group::handle_event`]) and the time
//! ([`Group::handle_time`]), and performs what it asks for: two-sided sends, connects and
//! disconnects come out of [`Group::poll_action`] as [`GroupAction`]s, one-sided pushes
//! out of [`Group::drain_pushes`]. The only thing it takes from the fabric synchronously
//! is memory for a new view's regions, through the narrow [`LocalFabric`] trait (every
//! [`Endpoint`] is one). [`crate::runtime::drive`] is the glue that does all of this for
//! one round over an endpoint; the predicate thread of [`crate::runtime::GroupNode`] and
//! the simulations call it, so over the sim fabric a whole cluster runs deterministically
//! in one thread.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use spindle_transport_rdma::{Endpoint, Event, FailureReason, NodeId, Region, RegionId};

use crate::engine::{
    is_dare_imm, DeliveryBatch, Engine, EngineConfig, EngineEvent, Push, PushBytes,
};
use crate::error::{Error, Result};
use crate::layout::{DeliveryMode, Layout, SubgroupId, View, DECLARED_BYTES_MAX};
use crate::membership::{Membership, Outcome, ADDRESS_BYTES_MAX};
use crate::smc::Sender;

mod dare;
mod install;
mod leaving;
#[cfg(test)]
mod peer_tests;
mod redial;
mod state;
mod wire;

pub use dare::DARE_HANDOFF_CHUNK_BYTES_MAX;
use dare::{frozen_counters, DareHandoffs};
use redial::Redial;
pub use redial::REDIAL_US;
pub use state::state_plan;

/// Decodes `bytes` as a membership message a peer sent (join, redirect, new view, state,
/// declaration); true if they decode. Never panics, whatever the bytes: the entry point
/// of the `membership_message` fuzz target (`group/fuzz`).
pub fn decode_membership_message(bytes: &[u8]) -> bool {
    wire::Msg::decode(bytes).is_ok()
}

/// The bytes of a NEW_VIEW of `view` (its members in the view's order, each at its address
/// in `addresses`, empty if it has none there), with the subgroups' state `holders` and
/// the dare instances' `dare_first_term`: for tests that forge a NEW_VIEW (delivered with
/// [`MEMBERSHIP_IMM`] as an [`Event::Recv`] to [`Group::handle_event`]).
#[doc(hidden)]
#[cfg(feature = "testkit")]
pub fn encode_new_view(
    view: &View,
    addresses: BTreeMap<NodeId, String>,
    holders: BTreeMap<SubgroupId, Vec<NodeId>>,
    dare_first_term: u64,
) -> Vec<u8> {
    let addresses = view
        .members
        .iter()
        .map(|m| (*m, addresses.get(m).cloned().unwrap_or_default()))
        .collect();
    Msg::NewView(wire::NewView {
        view: view.clone(),
        addresses,
        holders,
        dare_first_term,
    })
    .encode()
}

pub use leaving::{Exclusion, LEAVE_LINGER_US};

use wire::{send, Msg};

/// The immediate of every two-sided membership message (join, redirect, new view, state).
pub const MEMBERSHIP_IMM: u32 = 0x5D5_0001;
/// Largest subgroup state one transfer carries, in bytes.
pub const STATE_BYTES_MAX: usize = spindle_transport_rdma::SEND_BYTES_MAX - 64;
/// States kept that arrived before their view.
pub const EARLY_STATES_MAX: usize = 64;
/// Most contacts a joiner keeps: its configured ones and the leaders it was redirected
/// to (a redirect names a new one at the front; past this the last is let go).
pub const JOIN_CONTACTS_MAX: usize = 256;
/// Outputs kept for the caller before the group stops producing more.
pub const OUTPUTS_MAX: usize = 65_536;

/// The deterministic layout function: the subgroups of a view, or why the view is
/// inadequate (it cannot give every subgroup its minimum members; the group then waits
/// for joins). Every member must use the same function.
pub type LayoutFn = Arc<dyn Fn(&View) -> std::result::Result<Layout, String> + Send + Sync>;

/// What a group takes from its own side of the fabric synchronously: who it is and memory
/// for a new view's regions. Everything else it asks of the fabric comes out as a
/// [`GroupAction`]. Every [`Endpoint`] is a `LocalFabric`.
pub trait LocalFabric {
    /// This node's id.
    fn local_node(&self) -> NodeId;
    /// This node's fabric address (what joiners and new members dial).
    fn local_address(&self) -> String;
    /// Registers a region of `len_bytes` that peers may write into.
    fn register_local_region(
        &self,
        id: RegionId,
        len_bytes: usize,
    ) -> spindle_transport_rdma::Result<Region>;
    /// True if `peer`'s region `id` is known here (announced): a dare subgroup's core
    /// asks for the log regions it waits for.
    fn knows_remote_region(&self, peer: NodeId, id: RegionId) -> bool;
    /// A stall of this process past the fabric's suspicion floor that ended at most
    /// `within_us` ago or is still going on, in ms ([`Endpoint::stall_ms`]).
    fn local_stall_ms(&self, within_us: u64) -> Option<u64>;
}

impl<E: Endpoint + ?Sized> LocalFabric for E {
    fn local_node(&self) -> NodeId {
        self.node()
    }
    fn local_address(&self) -> String {
        self.address()
    }
    fn register_local_region(
        &self,
        id: RegionId,
        len_bytes: usize,
    ) -> spindle_transport_rdma::Result<Region> {
        self.register_region(id, len_bytes)
    }
    fn knows_remote_region(&self, peer: NodeId, id: RegionId) -> bool {
        self.remote_region(peer, id).is_some()
    }
    fn local_stall_ms(&self, within_us: u64) -> Option<u64> {
        self.stall_ms(std::time::Duration::from_micros(within_us))
    }
}

/// Something the group asks the runtime to do on the fabric, in order (see
/// [`Group::poll_action`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupAction {
    /// Open a link to `peer` at `address` (a no-op when one exists).
    Connect {
        /// The peer.
        peer: NodeId,
        /// Its fabric address.
        address: String,
    },
    /// Close the link to `peer`.
    Disconnect {
        /// The peer.
        peer: NodeId,
    },
    /// A two-sided membership message (join, redirect, new view, declaration, state).
    Send {
        /// The peer.
        peer: NodeId,
        /// The immediate ([`MEMBERSHIP_IMM`]).
        imm: u32,
        /// The message.
        bytes: Vec<u8>,
        /// Give it back with [`Group::handle_unsent`] when the link is not up yet or its
        /// queue is full (a state transfer must arrive); otherwise a failed send is
        /// dropped (the protocol repeats joins, redirects and declarations itself).
        retry: bool,
    },
    /// The regions of a view two views old: no peer writes into them any more.
    DeregisterRegion(RegionId),
}

/// How a group runs.
#[derive(Clone)]
pub struct GroupConfig {
    /// Engine settings.
    pub engine: EngineConfig,
    /// The layout function.
    pub layout: LayoutFn,
    /// A member whose row does not say `active` this long after a view was installed is
    /// suspected (a joiner that never arrived, a member that never installed the view).
    pub activation_timeout_us: u64,
    /// How often a joiner repeats its request.
    pub join_retry_us: u64,
    /// Which group this node belongs to (DCPS: the DDS domain id). A member refuses a
    /// joiner that names another, and the joiner stops with an error naming both: nodes
    /// of two groups never share a view, whatever their contacts say.
    pub group_id: u64,
    /// How messages name a group id (default: `group <id>`); an application that packs
    /// more than a number into its ids says what they mean (DCPS: the domain and the
    /// wire version).
    pub group_label: fn(u64) -> String,
}

/// The default [`GroupConfig::group_label`]: `group <id>`.
pub fn plain_group_label(group_id: u64) -> String {
    format!("group {group_id}")
}

impl std::fmt::Debug for GroupConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConfig")
            .field("engine", &self.engine)
            .field("activation_timeout_us", &self.activation_timeout_us)
            .field("join_retry_us", &self.join_retry_us)
            .field("group_id", &self.group_id)
            .finish()
    }
}

impl GroupConfig {
    /// Defaults around `layout`: every technique on, 5 s activation time-out, 200 ms join
    /// retry.
    pub fn new(layout: LayoutFn) -> GroupConfig {
        GroupConfig {
            engine: EngineConfig::default(),
            layout,
            activation_timeout_us: 5_000_000,
            join_retry_us: 200_000,
            group_id: 0,
            group_label: plain_group_label,
        }
    }
}

/// A view the group installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewInstalled {
    /// The view.
    pub view: View,
    /// Its subgroups, or `None` when the view is inadequate.
    pub layout: Option<Layout>,
    /// Why the view is inadequate, if it is.
    pub inadequate: Option<String>,
    /// Members new in this view.
    pub joined: Vec<NodeId>,
    /// Members of the previous view not in this one (failed, cut off or left).
    pub departed: Vec<NodeId>,
}

/// What the group hands to the layer above, in order.
#[derive(Debug)]
pub enum GroupOutput {
    /// Messages delivered in one subgroup.
    Delivery(DeliveryBatch),
    /// A new view is installed; deliveries after this belong to it.
    ViewInstalled(ViewInstalled),
    /// Snapshot this subgroup's state as of now (every delivery of the previous view
    /// applied, none of the new one) and pass it to [`Group::provide_state`] for `joiner`.
    StateRequested {
        /// The subgroup.
        subgroup: SubgroupId,
        /// The member that enters it.
        joiner: NodeId,
    },
    /// Install this state of the subgroup before applying any later delivery.
    InstallState {
        /// The subgroup.
        subgroup: SubgroupId,
        /// The state, as the giver's application snapshotted it.
        state: Vec<u8>,
    },
    /// The node stopped; the text says why (lost its majority, removed, a transfer cut
    /// off). The application should exit or rejoin as a new process.
    ShutDown(String),
    /// The node left the group as it asked.
    Left,
    /// A large message of `subgroup` waits for an RDMC buffer that a delivered batch
    /// this node's application still holds pins (see [`DeliveryBatch`]): give back what
    /// is held of that subgroup's in-place messages, copying out what must be kept.
    PinsWanted {
        /// The subgroup.
        subgroup: SubgroupId,
    },
    /// Messages of this node that the last trim cut off and that the new view cannot
    /// re-send, because this node is no longer a sender of the subgroup there; they are
    /// handed back, in order, not lost silently (the application may send them elsewhere).
    Undeliverable {
        /// The subgroup.
        subgroup: SubgroupId,
        /// The payloads, in sender order.
        payloads: Vec<Vec<u8>>,
    },
}

/// Counters of what the group did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Views installed (the first included).
    pub views_installed: u64,
    /// Messages re-sent in a new view after a trim cut them off.
    pub resent: u64,
}

enum Phase {
    Joining {
        contacts: Vec<(NodeId, String)>,
        next: usize,
        next_attempt_us: u64,
    },
    Member,
    Done,
}

/// A subgroup's state, as a giver sent it for view `vid`.
struct StateTransfer {
    /// Who sent it: only the giver the view's plan names is heard.
    from: NodeId,
    vid: u32,
    subgroup: SubgroupId,
    skips: Vec<(NodeId, u64)>,
    state: Vec<u8>,
}

struct Current {
    view: View,
    layout: Option<Layout>,
    engine: Engine,
    membership: Membership,
    installed_us: u64,
    /// The subgroups whose state this node waits for, each with the member the view's
    /// state-transfer plan names as its giver (a state from anyone else is refused).
    awaiting_state: BTreeMap<SubgroupId, NodeId>,
    joiners: Vec<NodeId>,
    /// This node joined the group in this view.
    joined_now: bool,
    /// The NEW_VIEW message for this view's joiners (kept by the member that sends it, so
    /// a joiner asking again gets it again).
    new_view_msg: Option<Vec<u8>>,
}

/// One node's membership in a group. See the module docs.
pub struct Group {
    me: NodeId,
    address: String,
    cfg: GroupConfig,
    phase: Phase,
    current: Option<Current>,
    /// The previous view's membership, kept until its last pushes (trim echoes) are out.
    retiring: Option<Membership>,
    /// Regions of recent views, deregistered two views later.
    old_regions: VecDeque<Vec<RegionId>>,
    addresses: BTreeMap<NodeId, String>,
    /// Per subgroup: the members holding its state.
    holders: BTreeMap<SubgroupId, Vec<NodeId>>,
    /// Members of the current view not reachable yet, dialed again meanwhile.
    redial: Redial,
    pending_resends: BTreeMap<SubgroupId, VecDeque<Vec<u8>>>,
    /// Per (subgroup, sender): re-sends this node already delivered, for the next adequate
    /// view's engine.
    pending_skips: BTreeMap<(SubgroupId, NodeId), u64>,
    /// The skips applied to the current view's engine: a joiner that takes this node's
    /// state of a subgroup takes its skips with it (the state holds those messages).
    current_skips: BTreeMap<(SubgroupId, NodeId), u64>,
    /// State transfers waiting for their link (given back by [`Group::handle_unsent`]).
    pending_state_sends: Vec<(NodeId, Vec<u8>)>,
    /// What the runtime is to do on the fabric, in order.
    actions: VecDeque<GroupAction>,
    /// States that arrived before the view they belong to (a giver may be faster than the
    /// member that sends NEW_VIEW).
    early_states: VecDeque<StateTransfer>,
    outputs: VecDeque<GroupOutput>,
    stats: GroupStats,
    waker: Option<Arc<dyn Fn() + Send + Sync>>,
    /// What this node wants declared (see [`Group::declare`]) and when it next asks the
    /// leader, until a view carries it.
    declare_wanted: Option<Vec<u8>>,
    next_declare_us: u64,
    /// When this node's leave was decided (the trim that removes it is held by a
    /// majority): it lingers, echoing that trim, until the others dropped it or
    /// [`LEAVE_LINGER_US`] passed.
    left_at_us: Option<u64>,
    /// The first peer that told this node it was excluded (its link's last word).
    excluded: Option<Exclusion>,
    /// The view whose majority this node lost without being excluded, once it shut down
    /// for that ([`Group::lost_majority`]).
    lost_majority: Option<u32>,
    /// While joining: why the last link to each contact failed (cleared when it links),
    /// so a join that times out can say what stood in its way.
    join_failures: BTreeMap<NodeId, FailureReason>,
    /// The hand-offs of the dare subgroups at the current view change.
    dare: DareHandoffs,
    /// The first term of every dare instance of the next view: one past every term any
    /// dare subgroup reported at any hand-off so far. One group-wide bound, not one per
    /// subgroup: a dare subgroup's log region ids are keyed by its ordinal among the
    /// layout's dare subgroups and its term, and a layout that gains or reorders dare
    /// subgroups hands an ordinal to another subgroup — whose terms must then be past
    /// every term the ordinal was used with, so no write of an ended instance still in
    /// flight can land in a new instance's log.
    dare_first_term: u64,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("me", &self.me)
            .field("view", &self.current.as_ref().map(|c| &c.view))
            .field("stats", &self.stats)
            .finish()
    }
}

impl Group {
    fn empty(me: NodeId, address: String, cfg: GroupConfig, phase: Phase) -> Group {
        Group {
            me,
            address,
            cfg,
            phase,
            current: None,
            retiring: None,
            old_regions: VecDeque::new(),
            addresses: BTreeMap::new(),
            holders: BTreeMap::new(),
            redial: Redial::default(),
            pending_resends: BTreeMap::new(),
            pending_skips: BTreeMap::new(),
            current_skips: BTreeMap::new(),
            pending_state_sends: Vec::new(),
            actions: VecDeque::new(),
            early_states: VecDeque::new(),
            outputs: VecDeque::new(),
            stats: GroupStats::default(),
            waker: None,
            declare_wanted: None,
            next_declare_us: 0,
            left_at_us: None,
            excluded: None,
            lost_majority: None,
            join_failures: BTreeMap::new(),
            dare: DareHandoffs::default(),
            dare_first_term: 0,
        }
    }

    /// Starts a group from its first view: every member calls this with the same `view`
    /// and the members' fabric `addresses`.
    pub fn bootstrap<L: LocalFabric + ?Sized>(
        local: &L,
        view: View,
        addresses: BTreeMap<NodeId, String>,
        cfg: GroupConfig,
        now_us: u64,
    ) -> Result<Group> {
        let me = local.local_node();
        let mut g = Group::empty(me, local.local_address(), cfg, Phase::Member);
        if let Some(m) = view.members.iter().find(|m| !addresses.contains_key(m)) {
            return Err(Error::Config(format!("no address for member {m}")));
        }
        g.addresses = addresses;
        let plan = g.enter_view(local, view.clone(), &[], now_us)?;
        debug_assert!(plan.is_empty(), "a first view transfers no state");
        g.announce(view, Vec::new(), Vec::new());
        Ok(g)
    }

    /// A node that joins an existing group through any of `contacts` (a member that is not
    /// the leader redirects it to the leader).
    pub fn join<L: LocalFabric + ?Sized>(
        local: &L,
        contacts: Vec<(NodeId, String)>,
        cfg: GroupConfig,
    ) -> Result<Group> {
        if contacts.is_empty() {
            return Err(Error::Config("a joiner needs at least one contact".into()));
        }
        let address = local.local_address();
        if address.len() > ADDRESS_BYTES_MAX {
            return Err(Error::Config(format!(
                "address {address:?} is longer than {ADDRESS_BYTES_MAX} bytes"
            )));
        }
        Ok(Group::empty(
            local.local_node(),
            address,
            cfg,
            Phase::Joining {
                contacts,
                next: 0,
                next_attempt_us: 0,
            },
        ))
    }

    // ----- getters ------------------------------------------------------------------

    /// This node.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// The fabric addresses of the members this node has known (the current view's and
    /// earlier ones'): where a node that lost its place may ask to join again.
    pub fn addresses(&self) -> &BTreeMap<NodeId, String> {
        &self.addresses
    }

    /// While joining: why the last link to each contact that failed did (a contact linked
    /// since is not listed). Empty once a member.
    pub fn join_failures(&self) -> &BTreeMap<NodeId, FailureReason> {
        &self.join_failures
    }

    /// The current view, once this node is a member.
    pub fn view(&self) -> Option<&View> {
        self.current.as_ref().map(|c| &c.view)
    }

    /// The current layout (`None` while joining or when the view is inadequate).
    pub fn layout(&self) -> Option<&Layout> {
        self.current.as_ref().and_then(|c| c.layout.as_ref())
    }

    /// True once the node is a member with its state installed.
    pub fn is_active(&self) -> bool {
        matches!(self.phase, Phase::Member)
            && self
                .current
                .as_ref()
                .is_some_and(|c| c.awaiting_state.is_empty())
    }

    /// True once the node shut down or left.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// What the group did so far.
    pub fn stats(&self) -> GroupStats {
        self.stats
    }

    /// The current engine (its counters, received and delivered numbers).
    pub fn engine(&self) -> Option<&Engine> {
        self.current.as_ref().map(|c| &c.engine)
    }

    /// This node's log of `subgroup` is durable through the first `persisted_num` messages
    /// of the current view's delivery order: publishes it as the node's `persisted_num`
    /// (see [`Engine::handle_persisted`]). [`Error::Wedged`] between views.
    pub fn handle_persisted(&mut self, subgroup: SubgroupId, persisted_num: u64) -> Result<()> {
        match self.current.as_mut() {
            Some(c) => c.engine.handle_persisted(subgroup, persisted_num),
            None => Err(Error::Wedged { subgroup }),
        }
    }

    /// A handle for sending in `subgroup` in the current view. During a view change, and
    /// while the previous view's re-sends are still going out, this is
    /// [`Error::Wedged`]: retry after the next [`GroupOutput::ViewInstalled`].
    pub fn sender(&self, subgroup: SubgroupId) -> Result<Sender> {
        let Some(c) = &self.current else {
            return Err(Error::Wedged { subgroup });
        };
        if matches!(self.phase, Phase::Done) {
            return Err(Error::Stopped);
        }
        if c.layout.is_none() {
            return Err(Error::Inadequate(format!("view {}", c.view.vid)));
        }
        if !c.awaiting_state.is_empty()
            || c.engine.is_wedged()
            || self
                .pending_resends
                .get(&subgroup)
                .is_some_and(|q| !q.is_empty())
        {
            return Err(Error::Wedged { subgroup });
        }
        c.engine.sender(subgroup)
    }

    /// Registers `wake` to be called after every application commit (in this and later
    /// views); the runtime unparks its thread with it.
    pub fn set_waker(&mut self, wake: Arc<dyn Fn() + Send + Sync>) {
        if let Some(c) = &mut self.current {
            let w = Arc::clone(&wake);
            c.engine.set_waker(move || w());
        }
        self.waker = Some(wake);
    }

    // ----- inputs -------------------------------------------------------------------

    /// Declares `declared` for this node (replacing what it declared before; empty
    /// withdraws it): the leader proposes it, and the next view carries it in
    /// [`View::declared`] — so the layout function, and with it the subgroups, may change.
    /// The request is repeated until a view carries it (a leader may fail first), so the
    /// last call wins.
    pub fn declare(&mut self, declared: Vec<u8>) -> Result<()> {
        if declared.len() > DECLARED_BYTES_MAX {
            return Err(Error::Config(format!(
                "a declaration of {} bytes, at most {DECLARED_BYTES_MAX}",
                declared.len()
            )));
        }
        self.declare_wanted = Some(declared);
        self.next_declare_us = 0;
        Ok(())
    }

    /// Asks the leader for this node's declaration if the view does not carry it yet.
    fn request_declaration(&mut self, now_us: u64) {
        let me = self.me;
        let Some(want) = &self.declare_wanted else {
            return;
        };
        let Some(c) = &mut self.current else {
            return;
        };
        if c.view.declared.get(&me).map_or(&[][..], |d| d) == want.as_slice() {
            self.declare_wanted = None;
            return;
        }
        if now_us < self.next_declare_us {
            return;
        }
        self.next_declare_us = now_us + self.cfg.join_retry_us;
        match c.membership.leader() {
            Some(l) if l == me => c.membership.request_declare(me, want.clone()),
            Some(l) => {
                let msg = Msg::Declare {
                    node: me,
                    declared: want.clone(),
                };
                self.actions.push_back(send(l, msg.encode()));
            }
            None => {}
        }
    }

    /// Leaves the group gracefully: the others remove this node in the next view;
    /// [`GroupOutput::Left`] follows.
    pub fn leave(&mut self) {
        if let Some(c) = &mut self.current {
            c.membership.leave();
        }
    }

    /// The application's snapshot for a [`GroupOutput::StateRequested`]; it is sent to
    /// `joiner` (retried until the link is up).
    pub fn provide_state(
        &mut self,
        subgroup: SubgroupId,
        joiner: NodeId,
        state: &[u8],
    ) -> Result<()> {
        if state.len() > STATE_BYTES_MAX {
            return Err(Error::Config(format!(
                "state of subgroup {subgroup} has {} bytes, at most {STATE_BYTES_MAX}",
                state.len()
            )));
        }
        let Some(c) = &self.current else {
            return Ok(());
        };
        let skips: Vec<(NodeId, u64)> = self
            .current_skips
            .iter()
            .filter(|((sg, _), _)| *sg == subgroup)
            .map(|((_, s), n)| (*s, *n))
            .collect();
        let msg = Msg::State {
            vid: c.view.vid,
            subgroup,
            skips,
            state: state.to_vec(),
        };
        self.pending_state_sends.push((joiner, msg.encode()));
        Ok(())
    }

    // ----- the loop -----------------------------------------------------------------

    /// A fabric event (a peer failed or connected, a two-sided message arrived). A joiner
    /// that receives its first view enters it here, so `local` gives it region memory.
    pub fn handle_event<L: LocalFabric + ?Sized>(&mut self, local: &L, ev: Event, now_us: u64) {
        self.fabric_event(local, ev, now_us);
    }

    /// Runs the engine and the membership protocol once at time `now_us`, installs a new
    /// view when one is decided (registering its regions through `local`), and queues
    /// what is to go out: actions for [`Group::poll_action`], pushes for
    /// [`Group::drain_pushes`]. Returns true if anything happened.
    pub fn handle_time<L: LocalFabric + ?Sized>(&mut self, local: &L, now_us: u64) -> bool {
        let mut work = false;
        match self.phase {
            Phase::Done => return work,
            Phase::Joining { .. } => {
                self.join_attempt(now_us);
                return work | self.take_action_work();
            }
            Phase::Member => {}
        }
        if self.outputs.len() >= OUTPUTS_MAX {
            return work;
        }
        if let Some(c) = &self.current {
            let again = self.redial.due(now_us, &c.view.members, &self.addresses);
            self.actions.extend(again);
        }
        let me = self.me;
        let Some(c) = self.current.as_mut() else {
            return work;
        };
        let active = c.awaiting_state.is_empty();
        if active && c.layout.is_some() {
            work |= c.engine.step();
            if c.engine.has_dare() {
                for (peer, region) in c.engine.dare_regions_awaited() {
                    if local.knows_remote_region(peer, region) {
                        c.engine.handle_region_announced(peer, region);
                    }
                }
                let mut register = |id, len| Ok(local.register_local_region(id, len)?);
                work |= c.engine.step_dare(now_us, &mut register);
                let withdrawn = c.engine.take_withdrawn_regions();
                self.actions
                    .extend(withdrawn.into_iter().map(GroupAction::DeregisterRegion));
            }
        }
        while let Some(e) = c.engine.poll_event() {
            if let EngineEvent::PeerMisbehaved { peer, detail, .. } = &e {
                if *peer == me {
                    // This node's own ring was rewritten (a peer that maps its memory):
                    // what it sends can no longer be trusted; the others go on without it.
                    self.shut_down(format!("this node's memory was overwritten: {detail}"));
                    return true;
                }
            }
            let (EngineEvent::Wedged { peer, .. } | EngineEvent::PeerMisbehaved { peer, .. }) = e;
            c.membership.suspect(peer);
        }
        work |= c.membership.step(now_us);
        if !active && c.membership.wants_wedge() {
            if c.joined_now {
                // A joiner without its state has nothing to continue from: restart it.
                self.shut_down(
                    "a view change began before this node's state transfer finished".into(),
                );
                return true;
            }
            // A member that only entered new subgroups (a layout change) goes on: it has
            // delivered nothing in them, so the trim cuts nothing it lacks, and it keeps
            // its place in the group. Its state of those subgroups stays what the
            // application had (see the limitation in the crate docs).
            tracing::warn!(
                node = me,
                subgroups = ?c.awaiting_state,
                "a view change cut this member's state transfer"
            );
            c.awaiting_state.clear();
            c.membership.set_active();
        }
        if c.membership.wants_wedge() && !c.engine.is_wedged() {
            c.engine.wedge();
            let withdrawn = c.engine.take_withdrawn_regions();
            self.actions
                .extend(withdrawn.into_iter().map(GroupAction::DeregisterRegion));
            let frozen = frozen_counters(c, me);
            c.membership.set_frozen(frozen);
            work |= c.membership.step(now_us);
        }
        if now_us.saturating_sub(c.installed_us) > self.cfg.activation_timeout_us {
            for n in c.membership.inactive() {
                if n != me {
                    tracing::info!(node = me, peer = n, "never became active: suspected");
                    c.membership.suspect(n);
                }
            }
        }
        match c.membership.outcome().cloned() {
            Some(Outcome::Install(trim)) => match self.install(local, trim, now_us) {
                Ok(done) => work |= done,
                Err(e) => {
                    self.shut_down(format!("installing the next view: {e}"));
                    return true;
                }
            },
            Some(Outcome::ShutDown(mut why)) => {
                // Peers lost right after this process stalled past the suspicion floor
                // (SIGSTOP, swapped out): they excluded it, whatever reached it first —
                // their closed links, wedges or their last word.
                let since_us = now_us.saturating_sub(c.installed_us);
                if let (None, Some(first), Some(stall_ms)) = (
                    self.excluded,
                    c.membership.lost_majority_to().first(),
                    local.local_stall_ms(since_us),
                ) {
                    self.excluded = Some(Exclusion {
                        vid: c.view.vid,
                        by: *first,
                        silent_ms: Some(stall_ms),
                    });
                    why = format!(
                        "{why}, after this process stalled for {stall_ms} ms (past the \
                         fabric's suspicion floor)"
                    );
                }
                if self.excluded.is_none() && !c.membership.lost_majority_to().is_empty() {
                    self.lost_majority = Some(c.view.vid);
                }
                self.shut_down(why);
                return true;
            }
            Some(Outcome::Left) => {
                let since = *self.left_at_us.get_or_insert(now_us);
                if c.membership.others_failed() || now_us.saturating_sub(since) >= LEAVE_LINGER_US {
                    self.finish(GroupOutput::Left);
                    return true;
                }
                // Linger: the echo of the trim goes out with this round's pushes.
                return work;
            }
            None => {}
        }
        self.request_declaration(now_us);
        work |= self.flush_resends();
        work |= !self.pending_state_sends.is_empty();
        work | self.take_action_work()
    }

    /// The next thing to do on the fabric, in order. A round performs every action, then
    /// drains the pushes ([`Group::drain_pushes`]: a new view's links are asked for before
    /// its writes), then performs the actions the drain released (state transfers, which
    /// follow the round's writes).
    pub fn poll_action(&mut self) -> Option<GroupAction> {
        self.actions.pop_front()
    }

    /// A [`GroupAction::Send`] with `retry` that could not go out yet (no link, or its
    /// queue is full): it goes out again after the next [`Group::drain_pushes`].
    pub fn handle_unsent(&mut self, action: GroupAction) {
        if let GroupAction::Send {
            peer,
            bytes,
            retry: true,
            ..
        } = action
        {
            self.pending_state_sends.push((peer, bytes));
        }
    }

    /// Posts the queued one-sided pushes of this view (and of the previous view's last
    /// trim echoes) through `post`, which returns an error to hold a push for later (its
    /// peer has not announced the region yet, or its queue is full), then releases the
    /// pending state transfers to [`Group::poll_action`]. Returns how many pushes went
    /// out.
    pub fn drain_pushes(
        &mut self,
        mut post: impl FnMut(&Push, &PushBytes<'_>) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        if matches!(self.phase, Phase::Done) {
            // A stopped node writes nothing more.
            return 0;
        }
        let mut posted = 0;
        if let Some(r) = &mut self.retiring {
            posted += r.drain_pushes(&mut post);
        }
        if let Some(c) = &mut self.current {
            posted += c.membership.drain_pushes(&mut post);
            posted += c.engine.drain_pushes(&mut post);
        }
        for (to, msg) in std::mem::take(&mut self.pending_state_sends) {
            self.actions.push_back(GroupAction::Send {
                peer: to,
                imm: MEMBERSHIP_IMM,
                bytes: msg,
                retry: true,
            });
        }
        posted
    }

    /// Posts the dare subgroups' queued writes and sends ([`Engine::drain_dare`]).
    pub fn drain_dare(
        &mut self,
        post: impl FnMut(&crate::dare::DareOut, u32, RegionId) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        if matches!(self.phase, Phase::Done) {
            return 0;
        }
        match &mut self.current {
            Some(c) => c.engine.drain_dare(post),
            None => 0,
        }
    }

    /// True when actions are queued (the round did something the runtime must carry out).
    fn take_action_work(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Gives a delivered batch back after its upcall, for the engine to reuse its
    /// buffers ([`Engine::recycle`]).
    pub fn recycle(&mut self, batch: DeliveryBatch) {
        if let Some(c) = self.current.as_mut() {
            c.engine.recycle(batch);
        }
    }

    /// Why this node was excluded, once a member that suspected it said so (the
    /// [`GroupOutput::ShutDown`] text then starts with it).
    pub fn exclusion(&self) -> Option<Exclusion> {
        self.excluded
    }

    /// The view whose majority this node lost, when that (and not an exclusion) shut it
    /// down: too few of the view's members were reachable ([`Error::LostMajority`]).
    pub fn lost_majority(&self) -> Option<u32> {
        self.lost_majority
    }

    /// The next output, in order.
    pub fn poll(&mut self) -> Option<GroupOutput> {
        if let Some(o) = self.outputs.pop_front() {
            return Some(o);
        }
        let c = self.current.as_mut()?;
        c.engine
            .poll_delivery()
            .map(GroupOutput::Delivery)
            .or_else(|| {
                c.engine
                    .poll_pins_wanted()
                    .map(|subgroup| GroupOutput::PinsWanted { subgroup })
            })
    }

    // ----- internals ----------------------------------------------------------------

    fn fabric_event<L: LocalFabric + ?Sized>(&mut self, local: &L, ev: Event, now_us: u64) {
        match ev {
            Event::PeerFailed { peer, reason } => {
                if let (FailureReason::Unreachable(_), Some(c)) = (&reason, &self.current) {
                    let window_end_us = c
                        .installed_us
                        .saturating_add(self.cfg.activation_timeout_us);
                    if c.view.members.contains(&peer)
                        && self.redial.defer(peer, now_us, window_end_us)
                    {
                        return;
                    }
                }
                if let Some(c) = &mut self.current {
                    if let FailureReason::Excluded { silent_ms } = reason {
                        if self.excluded.is_none() && c.view.members.contains(&peer) {
                            self.excluded = Some(Exclusion {
                                vid: c.view.vid,
                                by: peer,
                                silent_ms: Some(silent_ms),
                            });
                        }
                    }
                    c.membership.suspect(peer);
                    c.engine.handle_dare_peer_failed(peer);
                }
                if let Phase::Joining { contacts, next, .. } = &mut self.phase {
                    if contacts.iter().any(|(c, _)| *c == peer) {
                        self.join_failures.insert(peer, reason);
                    }
                    if contacts.get(*next).is_some_and(|(c, _)| *c == peer) {
                        *next = (*next + 1) % contacts.len();
                    }
                }
            }
            Event::PeerConnected { peer } => {
                self.redial.connected(peer);
                self.join_failures.remove(&peer);
                if let Phase::Joining {
                    contacts,
                    next_attempt_us,
                    ..
                } = &mut self.phase
                {
                    if contacts.iter().any(|(c, _)| *c == peer) {
                        *next_attempt_us = now_us;
                    }
                }
            }
            Event::Recv { peer, imm, data } if imm == MEMBERSHIP_IMM => {
                if let Err(e) = self.message(local, peer, &data, now_us) {
                    tracing::warn!(node = self.me, peer, error = %e, "bad membership message");
                }
            }
            Event::Recv { peer, imm, data } if is_dare_imm(imm) => {
                if let Some(c) = &mut self.current {
                    if let Err(e) = c.engine.handle_dare_recv(peer, imm, &data) {
                        tracing::warn!(node = self.me, peer, error = %e, "bad dare message");
                    }
                }
            }
            Event::RegionAnnounced { peer, region } => {
                if let Some(c) = &mut self.current {
                    c.engine.handle_region_announced(peer, region.region);
                }
            }
            _ => {}
        }
    }

    fn message<L: LocalFabric + ?Sized>(
        &mut self,
        local: &L,
        peer: NodeId,
        data: &[u8],
        now_us: u64,
    ) -> Result<()> {
        match Msg::decode(data)? {
            // A joiner asks for itself only: a Join naming another node is refused.
            Msg::Join {
                node,
                address,
                group_id,
            } if node == peer => self.join_request(node, address, group_id),
            Msg::Refused { group_id } => {
                // Only a contact this joiner asked can turn it away.
                let asked = matches!(&self.phase, Phase::Joining { contacts, .. }
                    if contacts.iter().any(|(c, _)| *c == peer));
                if asked {
                    let label = self.cfg.group_label;
                    self.shut_down(format!(
                        "contact node {peer} is a member of {} and refused this node, \
                         configured for {}: its contacts reach another group",
                        label(group_id),
                        label(self.cfg.group_id)
                    ));
                } else {
                    tracing::warn!(
                        from = peer,
                        "a refusal while not joining through it: ignored"
                    );
                }
            }
            Msg::Join { node, .. } => {
                tracing::warn!(
                    from = peer,
                    node,
                    "a join request for another node: refused"
                );
            }
            Msg::Redirect { leader, address } => {
                if let Phase::Joining {
                    contacts,
                    next,
                    next_attempt_us,
                } = &mut self.phase
                {
                    // Only a contact this joiner asked redirects it, to an address that a
                    // member could have.
                    if address.len() > ADDRESS_BYTES_MAX
                        || !contacts.iter().any(|(c, _)| *c == peer)
                    {
                        tracing::warn!(
                            from = peer,
                            leader,
                            "a redirect not from a contact, or to an over-long address: ignored"
                        );
                        return Ok(());
                    }
                    contacts.retain(|(c, _)| *c != leader);
                    contacts.insert(0, (leader, address.clone()));
                    contacts.truncate(JOIN_CONTACTS_MAX);
                    *next = 0;
                    *next_attempt_us = now_us;
                    self.actions.push_back(GroupAction::Connect {
                        peer: leader,
                        address,
                    });
                }
            }
            Msg::NewView(nv) => self.new_view(local, peer, nv, now_us)?,
            Msg::Declare { node, declared } => {
                if node != peer || declared.len() > DECLARED_BYTES_MAX {
                    return Err(Error::Protocol(format!(
                        "DECLARE from {peer} for node {node}, {} bytes",
                        declared.len()
                    )));
                }
                if let Some(c) = &mut self.current {
                    // Only the leader proposes; the member repeats its request to whoever
                    // leads next.
                    if c.membership.leader() == Some(self.me) {
                        c.membership.request_declare(node, declared);
                    }
                }
            }
            Msg::DareEntries {
                vid,
                subgroup,
                first,
                entries,
            } => {
                let current = self.current.as_ref().map_or(0, |c| c.view.vid);
                self.dare
                    .received(peer, current, vid, subgroup, first, entries);
            }
            Msg::State {
                vid,
                subgroup,
                skips,
                state,
            } => {
                let transfer = StateTransfer {
                    from: peer,
                    vid,
                    subgroup,
                    skips,
                    state,
                };
                let current = self.current.as_ref().map_or(0, |c| c.view.vid);
                if vid > current {
                    if self.early_states.len() >= EARLY_STATES_MAX {
                        self.early_states.pop_front();
                    }
                    self.early_states.push_back(transfer);
                } else {
                    self.install_state(transfer);
                }
            }
        }
        Ok(())
    }

    /// A state arrived: hand it up if this node waits for it in its view and it came
    /// from the giver the view's plan names (anyone else's is refused); the node becomes
    /// active once it has every state it waits for.
    fn install_state(&mut self, t: StateTransfer) {
        let Some(c) = &mut self.current else {
            return;
        };
        if c.view.vid != t.vid {
            return;
        }
        match state::state_verdict(&c.awaiting_state, t.subgroup, t.from) {
            state::StateVerdict::Install => {}
            state::StateVerdict::NotTheGiver { giver } => {
                tracing::warn!(
                    subgroup = t.subgroup,
                    vid = t.vid,
                    from = t.from,
                    giver,
                    "a state transfer from a member the view's plan does not name as its giver: refused"
                );
                return;
            }
            state::StateVerdict::NotAwaited => return,
        }
        for (sender, n) in t.skips {
            let _ = c.engine.skip_resent(t.subgroup, sender, n);
        }
        c.awaiting_state.remove(&t.subgroup);
        self.outputs.push_back(GroupOutput::InstallState {
            subgroup: t.subgroup,
            state: t.state,
        });
        if c.awaiting_state.is_empty() {
            c.membership.set_active();
        }
    }

    fn join_request(&mut self, node: NodeId, address: String, group_id: u64) {
        if address.len() > ADDRESS_BYTES_MAX || !matches!(self.phase, Phase::Member) {
            return;
        }
        if group_id != self.cfg.group_id {
            tracing::warn!(
                node = self.me,
                joiner = node,
                theirs = %(self.cfg.group_label)(group_id),
                mine = %(self.cfg.group_label)(self.cfg.group_id),
                "a join request for another group: refused"
            );
            let refusal = Msg::Refused {
                group_id: self.cfg.group_id,
            };
            self.actions.push_back(send(node, refusal.encode()));
            return;
        }
        let Some(c) = &mut self.current else {
            return;
        };
        if c.joiners.contains(&node) {
            if let Some(msg) = &c.new_view_msg {
                self.actions.push_back(GroupAction::Connect {
                    peer: node,
                    address,
                });
                self.actions.push_back(send(node, msg.clone()));
            }
            return;
        }
        match c.membership.leader() {
            Some(l) if l == self.me => c.membership.request_join(node, address),
            Some(l) => {
                let msg = Msg::Redirect {
                    leader: l,
                    address: self.addresses.get(&l).cloned().unwrap_or_default(),
                };
                self.actions.push_back(send(node, msg.encode()));
            }
            None => {}
        }
    }

    fn join_attempt(&mut self, now_us: u64) {
        let retry = self.cfg.join_retry_us;
        let me = self.me;
        let join = Msg::Join {
            node: me,
            address: self.address.clone(),
            group_id: self.cfg.group_id,
        };
        let Phase::Joining {
            contacts,
            next,
            next_attempt_us,
        } = &mut self.phase
        else {
            return;
        };
        if now_us < *next_attempt_us {
            return;
        }
        *next_attempt_us = now_us + retry;
        let (c, addr) = contacts[*next % contacts.len()].clone();
        *next = (*next + 1) % contacts.len();
        self.actions.push_back(GroupAction::Connect {
            peer: c,
            address: addr,
        });
        // Not linked yet, the send fails: the PeerConnected event brings the next attempt
        // forward.
        self.actions.push_back(send(c, join.encode()));
    }

    /// Creates the engine and membership of `view`, links to its members, and returns
    /// the state-transfer plan `(subgroup, giver, receiver)`.
    fn enter_view<L: LocalFabric + ?Sized>(
        &mut self,
        local: &L,
        view: View,
        joined: &[NodeId],
        now_us: u64,
    ) -> Result<Vec<(SubgroupId, NodeId, NodeId)>> {
        let me = self.me;
        let layout = match (self.cfg.layout)(&view) {
            Ok(l) => match l.validate(&view) {
                Ok(()) => Ok(l),
                Err(e) => Err(format!("the layout function's layout is invalid: {e}")),
            },
            Err(why) => Err(why),
        };
        let (plan, holders) = state_plan(layout.as_ref().ok(), &view, &self.holders, joined);
        self.holders = holders;
        let awaiting = state::awaited_states(&plan, me);
        let engine_layout = layout.clone().unwrap_or_default();
        let membership = Membership::new(
            me,
            (self.cfg.group_id, self.cfg.group_label),
            view.clone(),
            engine_layout.clone(),
            awaiting.is_empty(),
            |id, len| Ok(local.register_local_region(id, len)?),
        )?;
        let mut engine = Engine::new(
            me,
            view.clone(),
            engine_layout.clone(),
            self.cfg.engine.clone(),
            |id, len| Ok(local.register_local_region(id, len)?),
        )?;
        if let Some(w) = &self.waker {
            let w = Arc::clone(w);
            engine.set_waker(move || w());
        }
        for sg in &engine_layout.subgroups {
            if matches!(sg.mode, DeliveryMode::Dare(_)) && sg.members.contains(&me) {
                engine.set_dare_first_term(sg.id, self.dare_first_term)?;
            }
        }
        self.current_skips.clear();
        if layout.is_ok() {
            for ((sg, sender), count) in std::mem::take(&mut self.pending_skips) {
                let _ = engine.skip_resent(sg, sender, count);
                self.current_skips.insert((sg, sender), count);
            }
        }
        for m in view.members.iter().filter(|m| **m != me) {
            if let Some(a) = self.addresses.get(m) {
                self.actions.push_back(GroupAction::Connect {
                    peer: *m,
                    address: a.clone(),
                });
            }
        }
        let mut regions: Vec<RegionId> = engine.regions().iter().map(|(_, r, _)| *r).collect();
        regions.push(membership.region_id());
        self.old_regions.push_back(regions);
        while self.old_regions.len() > 3 {
            for r in self.old_regions.pop_front().unwrap_or_default() {
                self.actions.push_back(GroupAction::DeregisterRegion(r));
            }
        }
        self.current = Some(Current {
            view,
            layout: layout.as_ref().ok().cloned(),
            engine,
            membership,
            installed_us: now_us,
            awaiting_state: awaiting,
            joiners: Vec::new(),
            joined_now: joined.contains(&me),
            new_view_msg: None,
        });
        self.stats.views_installed += 1;
        if let Err(why) = &layout {
            tracing::info!(node = me, %why, "inadequate view");
        }
        Ok(plan)
    }

    /// States that arrived early for the view just announced.
    fn apply_early_states(&mut self) {
        let vid = self.current.as_ref().map_or(0, |c| c.view.vid);
        let early: Vec<_> = std::mem::take(&mut self.early_states).into_iter().collect();
        for t in early {
            if t.vid == vid {
                self.install_state(t);
            } else if t.vid > vid {
                self.early_states.push_back(t);
            }
        }
    }

    fn announce(&mut self, view: View, joined: Vec<NodeId>, departed: Vec<NodeId>) {
        let c = self.current.as_ref();
        let layout = c.and_then(|c| c.layout.clone());
        let inadequate = layout.is_none().then(|| {
            (self.cfg.layout)(&view)
                .err()
                .unwrap_or_else(|| "invalid layout".into())
        });
        self.outputs
            .push_back(GroupOutput::ViewInstalled(ViewInstalled {
                view,
                layout,
                inadequate,
                joined,
                departed,
            }));
    }

    fn shut_down(&mut self, why: String) {
        // A member told us it excluded us (its link's last word, or its membership row):
        // that, not what we concluded from the links it then closed, is why we stop.
        if self.excluded.is_none() {
            if let Some(c) = &self.current {
                if let Some(by) = c.membership.excluded_by() {
                    self.excluded = Some(Exclusion {
                        vid: c.view.vid,
                        by,
                        silent_ms: None,
                    });
                }
            }
        }
        let why = match self.excluded {
            Some(x) => format!("{}; {why}", x.error()),
            None => why,
        };
        tracing::info!(node = self.me, %why, "group shut down");
        self.finish(GroupOutput::ShutDown(why));
    }

    fn finish(&mut self, out: GroupOutput) {
        if let Some(c) = &mut self.current {
            c.engine.wedge();
            for m in c.view.members.iter().filter(|m| **m != self.me) {
                self.actions.push_back(GroupAction::Disconnect { peer: *m });
            }
        }
        self.phase = Phase::Done;
        self.outputs.push_back(out);
    }
}
