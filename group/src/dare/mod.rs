//! DARE: leader-based ordering over one-sided writes (Poke and Hoefler, HPDC 2015, §3).
//!
//! A [`DareNode`] is one member's part of one DARE group: a fixed list of members, one
//! of which is the *leader* of the current *term*. It is a sans-IO core like
//! [`crate::Engine`] and [`crate::rdmc::RdmcGroup`]: it reads its own regions, takes
//! inputs ([`DareNode::send`], [`DareNode::handle_recv`], [`DareNode::handle_peer_failed`],
//! the time given to [`DareNode::step`]) and hands back the writes and sends to post
//! ([`DareNode::poll_out`]), the messages to deliver ([`DareNode::poll_delivery`]) and what
//! happened ([`DareNode::poll_event`]). Region layout: [`layout`].
//!
//! ## Normal operation (DARE §3.3)
//!
//! * **Senders → leader: two-sided sends.** A member's message goes to the leader of its
//!   current term as one [`spindle_transport_rdma::Endpoint::send`] carrying its
//!   `sender_seq` (DARE's clients also reach the leader by message, not by writing into
//!   its memory). A per-sender inbox ring written one-sidedly would have to be re-pointed
//!   and re-keyed at every election, and the leader's CPU must touch each message anyway
//!   to append it. A sender keeps every message until it has delivered it itself (at most
//!   [`DareConfig::sender_window`], [`DareNode::can_send`]), and re-sends the undelivered
//!   ones to each new leader; the leader drops duplicates by `sender_seq` (it knows each
//!   sender's last appended sequence number from its log).
//! * **Leader → followers: one-sided writes.** The leader appends to its log (a ring of
//!   [`DareConfig::log_entries`] slots) and writes each entry into the same slot of every
//!   follower's log region, then the follower's `tail` word — the fabric applies a peer's
//!   writes in issue order, so a follower that sees `tail` sees the entries below it.
//!   The followers' CPUs take no part in placing entries.
//! * **Commit by quorum, learned by writes.** Our fabric has no one-sided reads (nor a
//!   completion per write), so DARE's "leader reads the remote tail" becomes
//!   *DARE-with-writes*: a follower that sees its `tail` move writes `pack(term, tail)`
//!   and the index it has delivered into the leader's control region (one small write
//!   per batch). The leader commits index `c` once a majority (itself included) holds
//!   its log up to `c` *as written by it in this term* — entries of earlier terms
//!   included, as in Viewstamped Replication (which is also why votes compare the term of
//!   the leader that last wrote a log's `tail`, not the term of its last entry) — then
//!   writes `commit` into each follower's log, never beyond what it has written to that
//!   follower.
//! * **Delivery.** Every member delivers its log in index order up to `commit`.
//! * **Bounds.** A slot is reused only once every member still linked to the leader has
//!   delivered its previous entry (their `applied` words); so the leader stops appending
//!   when the slowest linked member is `log_entries` behind — flow control, not loss.
//!
//! ## Leader election (DARE §3.2)
//!
//! * **Suspicion.** A follower suspects its leader when the fabric reports the link
//!   failed ([`DareNode::handle_peer_failed`]) or the leader's heartbeat word (written
//!   every [`DareConfig::heartbeat_us`]) has not changed for its election time-out (drawn
//!   per member and term in `[election_timeout_us, 2 × election_timeout_us)`, doubled
//!   for each election this member took part in since it last heard a leader, at most
//!   [`DARE_ELECTION_BACKOFF_SHIFT_MAX`] times: a fabric whose round trip — over real
//!   processes, the time for the peer's loop to come round — exceeds the time-out would
//!   otherwise split every vote for ever, each candidate's term overtaking the other's
//!   request before its grant returns).
//! * **Vote arrays.** A candidate takes the next term, votes for itself and writes
//!   `(last_index, last_term, term)` into `vote_req[its rank]` of every member (the term
//!   last, as the guard). A member grants at most one vote per term — to a candidate whose
//!   log is at least as up to date as its own (last term, then last index) — by writing
//!   the term into `grant[its rank]` of the candidate. "Up to date" compares
//!   `(log term, tail)`, the log term being the term of the leader that last wrote the
//!   log's `tail` word: a log is a prefix of that leader's log, and an index committed in
//!   term `t` is held by a majority whose log term is at least `t`. A majority of grants makes the
//!   leader of that term; any higher term seen in any word makes a member adopt it.
//! * **Revocation: re-keying.** A member that adopts a term withdraws its log region and
//!   registers it again under the new term's id ([`layout::log_region_id`]), copying its
//!   contents locally. Writes of a deposed leader name the old id and are refused by the
//!   fabric — also those already in flight (the fabric's equivalent of DARE's QP reset).
//!   The control words all carry terms, so stale ones are ignored.
//! * **Log adjustment.** A follower's first word to a new leader is `hello =
//!   pack(term, commit)`: its log up to `commit` is committed, hence in the leader's log.
//!   The leader rewrites the follower's log from `commit + 1` to its own tail (replacing
//!   any entries the follower got from deposed leaders), then its `tail`, before anything
//!   new; a follower whose missing entries left the leader's ring is reported
//!   [`DareEvent::Lagging`] and left out (it needs a state transfer, not implemented).
//!   The leader adjusts a follower only once the fabric announced the follower's log
//!   region of the term ([`DareNode::handle_region_announced`]: over shm a `hello` can
//!   overtake the announcement), and up to its own tail at election in one step (a
//!   new-term `tail` over part of that log would outrank a log holding all of it).
//!
//! Membership is fixed per group: members join or leave by the group's view change,
//! which builds a new group and hands the old one over ([`handoff`]; DARE's own
//! reconfiguration is not implemented). Members stop-fail: a peer whose link failed stays
//! failed for this group.

pub mod handoff;
pub mod layout;
pub mod runtime;

pub use handoff::{handoff_source, DareReport};

use std::collections::VecDeque;

use spindle_transport_rdma::{NodeId, Region, RegionId, WORD_BYTES};

use crate::{Error, Result};
use layout::{
    log_region_id_at, pack, unpack, CtrlLayout, LogLayout, DARE_INDEX_MAX, DARE_LOG_REGION_BASE,
    DARE_TERM_MAX, ENTRY_HEADER_BYTES, LOG_COMMIT_OFFSET, LOG_TAIL_OFFSET,
};

/// Most members of one DARE group.
pub const DARE_MEMBERS_MAX: usize = 64;
/// Most log slots of one member.
pub const DARE_LOG_ENTRIES_MAX: usize = 1 << 16;
/// Largest entry payload.
pub const DARE_PAYLOAD_BYTES_MAX: usize = 1 << 20;
/// Largest [`DareConfig::sender_window`].
pub const DARE_SENDER_WINDOW_MAX: usize = 4096;
/// Entries the leader writes to one follower per step (the rest follow in later steps),
/// past log adjustment: a follower is adjusted up to the leader's elected tail at once.
pub const DARE_REPLICATE_BATCH_MAX: usize = 64;
/// The 32-bit immediate of a message a sender hands to the leader.
pub const DARE_IMM: u32 = 0x4441_5245;
/// Bytes before the payload in a sender's message: its `sender_seq`.
pub const DARE_SEND_HEADER_BYTES: usize = 8;
/// Most doublings of a member's election time-out after elections without a leader
/// heard (64 ×: 10 ms grows to at most 0.64 – 1.28 s).
pub const DARE_ELECTION_BACKOFF_SHIFT_MAX: u32 = 6;

/// Settings of one DARE group (equal on every member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DareConfig {
    /// Slots in each member's log ring.
    pub log_entries: usize,
    /// Largest message payload, in bytes.
    pub payload_bytes_max: usize,
    /// Messages a sender may have handed over and not yet delivered itself.
    pub sender_window: usize,
    /// How often the leader writes its heartbeat word, in µs.
    pub heartbeat_us: u64,
    /// The smallest election time-out, in µs (each member draws one in
    /// `[this, 2 × this)` per term); well above `heartbeat_us`.
    pub election_timeout_us: u64,
}

impl Default for DareConfig {
    fn default() -> Self {
        DareConfig {
            log_entries: 1024,
            payload_bytes_max: 1024,
            sender_window: 256,
            heartbeat_us: 1_000,
            election_timeout_us: 10_000,
        }
    }
}

impl DareConfig {
    /// Checks the settings against the bounds; the error names the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(format!("dare: {m}")));
        if self.log_entries < 2 || self.log_entries > DARE_LOG_ENTRIES_MAX {
            return bad(format!(
                "log_entries ({}) must lie between 2 and {DARE_LOG_ENTRIES_MAX}",
                self.log_entries
            ));
        }
        if self.payload_bytes_max > DARE_PAYLOAD_BYTES_MAX {
            return bad(format!(
                "payload_bytes_max ({}) exceeds {DARE_PAYLOAD_BYTES_MAX}",
                self.payload_bytes_max
            ));
        }
        if self.sender_window == 0 || self.sender_window > DARE_SENDER_WINDOW_MAX {
            return bad(format!(
                "sender_window ({}) must lie between 1 and {DARE_SENDER_WINDOW_MAX}",
                self.sender_window
            ));
        }
        if self.heartbeat_us == 0 || self.election_timeout_us < 2 * self.heartbeat_us {
            return bad(format!(
                "election_timeout_us ({}) must be at least twice heartbeat_us ({}), which is \
                 at least 1",
                self.election_timeout_us, self.heartbeat_us
            ));
        }
        Ok(())
    }
}

/// A member's role in its current term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DareRole {
    /// Follows `leader` (a rank), once it has heard of one in this term.
    Follower {
        /// The leader's rank, if known.
        leader: Option<usize>,
    },
    /// Asking for votes.
    Candidate,
    /// Leads the current term.
    Leader,
}

/// Something the core asks its driver to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DareOut {
    /// A one-sided write into `peer`'s region `region` at `offset`, then (if `guard`)
    /// the word `guard.1` at `guard.0` with release semantics.
    Write {
        /// The peer.
        peer: NodeId,
        /// Its region.
        region: RegionId,
        /// Where.
        offset: usize,
        /// What.
        bytes: Vec<u8>,
        /// A guard word written after the bytes.
        guard: Option<(usize, u64)>,
    },
    /// A two-sided send with immediate [`DARE_IMM`].
    Send {
        /// The peer.
        peer: NodeId,
        /// The message.
        bytes: Vec<u8>,
    },
}

/// One delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DareDelivery {
    /// Its log index (from 1).
    pub index: u64,
    /// The term it was appended in.
    pub term: u64,
    /// The node that sent it.
    pub sender: NodeId,
    /// Its sequence number at that sender (from 1).
    pub sender_seq: u64,
    /// The payload.
    pub payload: Vec<u8>,
}

/// What happened, for the application and the checker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DareEvent {
    /// This member became the leader of `term`.
    Elected {
        /// The term.
        term: u64,
    },
    /// As leader, this member committed `index`, an entry of `entry_term` from
    /// `sender` with `sender_seq`.
    Committed {
        /// The index.
        index: u64,
        /// The entry's term.
        entry_term: u64,
        /// The sender.
        sender: NodeId,
        /// The sender's sequence number.
        sender_seq: u64,
    },
    /// As leader, this member left `peer` out: the entries it misses are no longer in
    /// the leader's ring.
    Lagging {
        /// The member left out.
        peer: NodeId,
    },
}

/// The leader's view of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replica {
    /// No `hello` in this term yet.
    Waiting,
    /// Adjusted: every entry below `next` has been written to it, and `commit` up to
    /// `commit_sent`.
    Synced { next: u64, commit_sent: u64 },
    /// Too far behind for the ring (or failed): left out.
    Out,
}

#[derive(Debug)]
struct LeaderState {
    replicas: Vec<Replica>,
    /// Per sender rank: messages handed to this leader, not yet appended.
    inbox: Vec<VecDeque<(u64, Vec<u8>)>>,
    /// Per sender rank: the last `sender_seq` in this leader's log.
    appended_seq: Vec<u64>,
    hb_counter: u64,
    hb_sent_us: u64,
    /// The leader's tail when it was elected: a follower is adjusted up to here in one
    /// step (see [`DareNode::lead`]).
    elected_tail: u64,
}

/// An entry read from a log ring.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    index: u64,
    term: u64,
    sender: u32,
    sender_seq: u64,
    payload: Vec<u8>,
}

/// A re-keying callback's job: withdraw `old` (if any), register a zeroed region of
/// `len_bytes` under `new`, and return it.
pub type Rekey<'a> = dyn FnMut(Option<RegionId>, RegionId, usize) -> Result<Region> + 'a;

/// One member's part of a DARE group. See the module docs.
#[derive(Debug)]
pub struct DareNode {
    me: NodeId,
    rank: usize,
    members: Vec<NodeId>,
    config: DareConfig,
    ctrl_layout: CtrlLayout,
    log_layout: LogLayout,
    ctrl: Region,
    /// The id the control region is registered under (the same on every member).
    ctrl_id: RegionId,
    /// The term the first step adopts (0, or one past an earlier instance's terms).
    first_term: u64,
    /// The id of the log region of term 0; term `t`'s is `log_base + t`.
    log_base: RegionId,
    log: Region,
    /// The term the log region is registered for (`None`: not yet registered).
    log_key: Option<u64>,
    term: u64,
    voted_for: Option<usize>,
    role: DareRole,
    failed: Vec<bool>,
    /// Per rank: the latest term whose log region that member announced to this one
    /// (the fabric's `RegionAnnounced`); a leader writes into a follower's log only once
    /// the region of its own term is known here.
    log_announced: Vec<Option<u64>>,
    /// Election time-out of this term, µs.
    timeout_us: u64,
    /// Elections begun since this member last heard a leader (or led): the time-out's
    /// doublings, at most [`DARE_ELECTION_BACKOFF_SHIFT_MAX`].
    backoff: u32,
    /// Last time the leader's heartbeat changed (or the term began), µs.
    heard_us: u64,
    last_hb: Vec<u64>,
    /// Follower: this term's `hello` sent; the last `tail` and `applied` acknowledged.
    hello_sent: bool,
    acked: (u64, u64),
    /// Delivered up to this index.
    applied: u64,
    /// Per sender rank: the last `sender_seq` delivered.
    delivered_seq: Vec<u64>,
    next_seq: u64,
    /// Own messages not yet delivered, oldest first, and how many of them went to the
    /// current `(term, leader)`.
    pending: VecDeque<(u64, Vec<u8>)>,
    pending_sent: usize,
    sent_to: Option<(u64, usize)>,
    leader: Option<LeaderState>,
    rng: u64,
    out: VecDeque<DareOut>,
    deliveries: VecDeque<DareDelivery>,
    events: VecDeque<DareEvent>,
    stopped: Option<String>,
    /// The time of the latest step, µs (for [`DareNode::describe`]).
    now_us: u64,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl DareNode {
    /// Bytes of the control region for `members` members.
    pub fn ctrl_region_bytes(members: usize) -> usize {
        CtrlLayout::new(members).bytes()
    }

    /// Bytes of the log region under `config`.
    pub fn log_region_bytes(config: &DareConfig) -> usize {
        LogLayout::new(config.log_entries, config.payload_bytes_max).bytes()
    }

    /// Member `me` of `members` (distinct), with its registered control region `ctrl`
    /// ([`DareNode::ctrl_region_bytes`]; registered under [`layout::DARE_CTRL_REGION_ID`], or per
    /// instance under an id every member uses). The log region is
    /// registered through the re-keying callback of the first [`DareNode::step`].
    /// `seed` draws the election time-outs.
    pub fn new(
        me: NodeId,
        members: Vec<NodeId>,
        config: DareConfig,
        ctrl: Region,
        seed: u64,
    ) -> Result<DareNode> {
        config.validate()?;
        let n = members.len();
        if n == 0 || n > DARE_MEMBERS_MAX {
            return Err(Error::Config(format!(
                "dare: {n} members, expected 1 to {DARE_MEMBERS_MAX}"
            )));
        }
        let mut sorted = members.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != n {
            return Err(Error::Config(format!("dare: members {members:?} repeat")));
        }
        let rank = members.iter().position(|&m| m == me).ok_or_else(|| {
            Error::Config(format!("dare: node {me} is not in members {members:?}"))
        })?;
        let ctrl_layout = CtrlLayout::new(n);
        if ctrl.len() < ctrl_layout.bytes() {
            return Err(Error::Config(format!(
                "dare: control region of {} bytes, need {}",
                ctrl.len(),
                ctrl_layout.bytes()
            )));
        }
        // A member writes only the control words of its own rank.
        ctrl.limit_peer_writes(ctrl_layout.peer_writes(&members, me)?)?;
        let log_layout = LogLayout::new(config.log_entries, config.payload_bytes_max);
        let mut rng = seed ^ u64::from(me).wrapping_mul(0xa076_1d64_78bd_642f);
        let timeout_us =
            config.election_timeout_us + splitmix(&mut rng) % config.election_timeout_us.max(1);
        Ok(DareNode {
            me,
            rank,
            members,
            log: ctrl.clone(),
            ctrl_id: ctrl.id(),
            first_term: 0,
            log_base: DARE_LOG_REGION_BASE,
            ctrl,
            ctrl_layout,
            log_layout,
            log_key: None,
            term: 0,
            voted_for: None,
            role: DareRole::Follower { leader: None },
            failed: vec![false; n],
            log_announced: vec![None; n],
            timeout_us,
            backoff: 0,
            heard_us: 0,
            last_hb: vec![0; n],
            hello_sent: false,
            acked: (0, 0),
            applied: 0,
            delivered_seq: vec![0; n],
            next_seq: 1,
            pending: VecDeque::new(),
            pending_sent: 0,
            sent_to: None,
            leader: None,
            rng,
            out: VecDeque::new(),
            deliveries: VecDeque::new(),
            events: VecDeque::new(),
            stopped: None,
            now_us: 0,
            config,
        })
    }

    /// Starts this member's terms at `term` instead of 0 (before its first step): a
    /// group's instance of a later view starts one past the highest term of the one it
    /// continues, so its log region ids ([`layout::log_region_id`]) are new and no write
    /// of the old instance still in flight can land in them. The control region's id is
    /// the one it was registered under (each instance its own). An error if `term` is
    /// past [`DARE_TERM_MAX`] or the member already stepped.
    pub fn with_first_term(mut self, term: u64) -> Result<DareNode> {
        if term > DARE_TERM_MAX || self.log_key.is_some() {
            return Err(Error::Config(format!(
                "dare: first term {term}: past DARE_TERM_MAX {DARE_TERM_MAX} or already started"
            )));
        }
        self.first_term = term;
        Ok(self)
    }

    /// Registers this member's log regions from `base` on (term `t` under `base + t`)
    /// instead of [`DARE_LOG_REGION_BASE`] (before its first step): several groups on one
    /// endpoint (an engine's dare subgroups) each take their own range of
    /// [`DARE_TERM_MAX`] + 1 ids. An error if the range leaves the 32-bit ids or the
    /// member already stepped.
    pub fn with_log_region_base(mut self, base: RegionId) -> Result<DareNode> {
        if u64::from(base) + DARE_TERM_MAX > u64::from(RegionId::MAX) || self.log_key.is_some() {
            return Err(Error::Config(format!(
                "dare: log region base {base:#x}: its terms pass the 32-bit ids, or the member \
                 already started"
            )));
        }
        self.log_base = base;
        Ok(self)
    }

    fn log_id(&self, term: u64) -> RegionId {
        log_region_id_at(self.log_base, term)
    }

    /// This member's node id.
    pub fn node(&self) -> NodeId {
        self.me
    }
    /// The members, in rank order.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }
    /// The current term.
    pub fn term(&self) -> u64 {
        self.term
    }
    /// The role in the current term.
    pub fn role(&self) -> DareRole {
        self.role
    }
    /// The leader of the current term as far as this member knows.
    pub fn leader(&self) -> Option<NodeId> {
        match self.role {
            DareRole::Leader => Some(self.me),
            DareRole::Follower { leader } => leader.map(|r| self.members[r]),
            DareRole::Candidate => None,
        }
    }
    /// The index delivered up to.
    pub fn applied(&self) -> u64 {
        self.applied
    }
    /// Why the member stopped, if it did (an election past [`DARE_TERM_MAX`], a log
    /// slot that does not hold the entry it should, a committed entry out of its
    /// sender's sequence, two leaders heard in one term, a failed re-keying).
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }
    /// The id the log region is registered under now.
    pub fn log_region_id(&self) -> Option<RegionId> {
        self.log_key.map(|t| self.log_id(t))
    }
    /// Messages handed over and not yet delivered here.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
    /// One line of this member's state for a diagnosis (a test or a benchmark that
    /// gives up prints it): term, role, vote, log (`tail`, its log term, `commit`),
    /// `applied`, failed peers, pending messages and where they went, timers and, as
    /// leader, each follower's replication state, inbox lengths and the control words.
    pub fn describe(&self) -> String {
        let (tail, log_term) = self.last_entry();
        let commit = self.log.load_u64(LOG_COMMIT_OFFSET);
        let n = self.members.len();
        let words = |f: &dyn Fn(usize) -> usize| -> Vec<(u64, u64)> {
            (0..n).map(|j| unpack(self.ctrl.load_u64(f(j)))).collect()
        };
        let grants: Vec<u64> = (0..n)
            .map(|j| self.ctrl.load_u64(self.ctrl_layout.grant(j)))
            .collect();
        let vote_req_terms: Vec<u64> = (0..n)
            .map(|j| {
                self.ctrl
                    .load_u64(self.ctrl_layout.vote_req(j) + 2 * WORD_BYTES)
            })
            .collect();
        let mut s = format!(
            "node {} rank {} now {}us: term {} role {:?} voted {:?} key {:?} | log tail {tail} \
             (log term {log_term}) commit {commit} applied {} | failed {:?} | pending {} sent {} \
             to {:?} | heard {}us timeout {}us hello {} acked {:?} | hb {:?} hello {:?} ack {:?} \
             grant {grants:?} vote_req {vote_req_terms:?} logs announced {:?} stopped {:?}",
            self.me,
            self.rank,
            self.now_us,
            self.term,
            self.role,
            self.voted_for,
            self.log_key,
            self.applied,
            self.failed,
            self.pending.len(),
            self.pending_sent,
            self.sent_to,
            self.heard_us,
            self.timeout_us,
            self.hello_sent,
            self.acked,
            words(&|j| self.ctrl_layout.hb(j)),
            words(&|j| self.ctrl_layout.hello(j)),
            words(&|j| self.ctrl_layout.ack(j)),
            self.log_announced,
            self.stopped,
        );
        if let Some(l) = &self.leader {
            let inbox: Vec<usize> = l.inbox.iter().map(VecDeque::len).collect();
            s.push_str(&format!(
                " | leader: replicas {:?} inbox {inbox:?} appended {:?}",
                l.replicas, l.appended_seq
            ));
        }
        s
    }

    /// True if [`DareNode::send`] would take a message.
    pub fn can_send(&self) -> bool {
        self.pending.len() < self.config.sender_window && self.stopped.is_none()
    }

    /// Hands a message to the group; returns its `sender_seq`. It goes to the leader at
    /// the next [`DareNode::step`] (and again to each new leader until delivered here).
    pub fn send(&mut self, payload: &[u8]) -> Result<u64> {
        if payload.len() > self.config.payload_bytes_max {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: self.config.payload_bytes_max,
            });
        }
        if let Some(why) = &self.stopped {
            return Err(Error::ShutDown(format!("dare: {why}")));
        }
        if !self.can_send() {
            return Err(Error::DareWindowFull {
                window: self.config.sender_window,
            });
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.push_back((seq, payload.to_vec()));
        Ok(seq)
    }

    /// The fabric reported `peer`'s link failed.
    pub fn handle_peer_failed(&mut self, peer: NodeId) {
        if let Some(r) = self.members.iter().position(|&m| m == peer) {
            if r != self.rank {
                self.failed[r] = true;
                if let Some(l) = &mut self.leader {
                    l.replicas[r] = Replica::Out;
                }
            }
        }
    }

    /// The fabric announced `peer`'s region `region` (`Event::RegionAnnounced`): if it
    /// is a log region, writes into it may now be posted. The driver hands over every
    /// announcement (other regions are ignored). A leader waits for the announcement of
    /// a follower's log region for its term before it adjusts that follower: on a fabric
    /// whose one-sided writes can overtake announcements (shm: a write is a memory copy,
    /// an announcement a message on a socket) the follower's `hello` may arrive first, and
    /// writes into a region the fabric does not know yet are refused — the entries would
    /// be missing under a later `tail`.
    pub fn handle_region_announced(&mut self, peer: NodeId, region: RegionId) {
        let Some(r) = self.members.iter().position(|&m| m == peer) else {
            return;
        };
        let Some(term) = region.checked_sub(self.log_base) else {
            return;
        };
        let term = u64::from(term);
        if term <= DARE_TERM_MAX && self.log_announced[r].is_none_or(|t| t < term) {
            self.log_announced[r] = Some(term);
        }
    }

    /// As leader: the followers' log regions of this term whose `hello` arrived but whose
    /// announcement did not (yet). A driver that may have missed announcements (made
    /// before its link was up) asks its fabric for these and reports the known ones with
    /// [`DareNode::handle_region_announced`].
    pub fn log_regions_awaited(&self) -> Vec<(NodeId, RegionId)> {
        let Some(l) = &self.leader else {
            return Vec::new();
        };
        (0..self.members.len())
            .filter(|&j| {
                l.replicas[j] == Replica::Waiting
                    && self.log_announced[j] != Some(self.term)
                    && unpack(self.ctrl.load_u64(self.ctrl_layout.hello(j))).0 == self.term
            })
            .map(|j| (self.members[j], self.log_id(self.term)))
            .collect()
    }

    /// A two-sided message from `peer` with immediate [`DARE_IMM`]: a message handed
    /// to this member as leader. Malformed bytes give an error naming the peer; a
    /// message to a member that is not (or no longer) leader is dropped (its sender
    /// re-sends it to the leader it learns of).
    pub fn handle_recv(&mut self, peer: NodeId, data: &[u8]) -> Result<()> {
        let Some(r) = self.members.iter().position(|&m| m == peer) else {
            return Err(Error::Protocol(format!(
                "dare: message from node {peer}, not a member"
            )));
        };
        if data.len() < DARE_SEND_HEADER_BYTES
            || data.len() - DARE_SEND_HEADER_BYTES > self.config.payload_bytes_max
        {
            return Err(Error::Protocol(format!(
                "dare: message of {} bytes from node {peer}; expected {} to {}",
                data.len(),
                DARE_SEND_HEADER_BYTES,
                DARE_SEND_HEADER_BYTES + self.config.payload_bytes_max
            )));
        }
        let seq = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
        let window = self.config.sender_window;
        if let Some(l) = &mut self.leader {
            if seq > l.appended_seq[r] && l.inbox[r].len() < window {
                l.inbox[r].push_back((seq, data[8..].to_vec()));
            }
        }
        Ok(())
    }

    /// The next write or send to post.
    pub fn poll_out(&mut self) -> Option<DareOut> {
        self.out.pop_front()
    }
    /// The next delivered message (in log order).
    pub fn poll_delivery(&mut self) -> Option<DareDelivery> {
        self.deliveries.pop_front()
    }
    /// The next event.
    pub fn poll_event(&mut self) -> Option<DareEvent> {
        self.events.pop_front()
    }

    /// One step at time `now_us`: reads the control words and the log, runs the
    /// election and replication, delivers. `rekey` (re)registers the log region when
    /// this member adopts a term. True if anything happened. An error stops the member
    /// ([`DareNode::stopped`]).
    pub fn step(&mut self, now_us: u64, rekey: &mut Rekey<'_>) -> Result<bool> {
        if let Some(why) = &self.stopped {
            return Err(Error::ShutDown(format!("dare: {why}")));
        }
        let r = self.step_inner(now_us, rekey);
        if let Err(e) = &r {
            self.stopped = Some(e.to_string());
        }
        r
    }

    fn step_inner(&mut self, now_us: u64, rekey: &mut Rekey<'_>) -> Result<bool> {
        let mut work = false;
        self.now_us = now_us;
        if self.log_key.is_none() {
            self.adopt(self.first_term, now_us, rekey)?;
            work = true;
        }
        work |= self.read_heartbeats(now_us, rekey)?;
        work |= self.read_vote_requests(now_us, rekey)?;
        if self.role == DareRole::Candidate {
            work |= self.count_votes(now_us)?;
        }
        work |= self.check_timers(now_us, rekey)?;
        if self.role == DareRole::Leader {
            work |= self.lead(now_us)?;
        } else {
            work |= self.follow()?;
        }
        work |= self.deliver()?;
        work |= self.hand_over();
        Ok(work)
    }

    fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    fn write(&mut self, rank: usize, region: RegionId, offset: usize, bytes: Vec<u8>) {
        self.out.push_back(DareOut::Write {
            peer: self.members[rank],
            region,
            offset,
            bytes,
            guard: None,
        });
    }

    fn write_word(&mut self, rank: usize, offset: usize, value: u64) {
        self.write(rank, self.ctrl_id, offset, value.to_le_bytes().to_vec());
    }

    /// Adopts `term`: new role follower with no known leader, no vote, the log re-keyed.
    fn adopt(&mut self, term: u64, now_us: u64, rekey: &mut Rekey<'_>) -> Result<()> {
        if term > DARE_TERM_MAX {
            return Err(Error::Protocol(format!(
                "dare: term {term} beyond DARE_TERM_MAX {DARE_TERM_MAX}"
            )));
        }
        // Invariant: terms only grow, and the log is keyed for the current term.
        assert!(
            self.log_key.is_none() || term > self.term,
            "terms only grow"
        );
        let len = self.log_layout.bytes();
        let old = self.log_key.map(|t| self.log_id(t));
        let region = rekey(old, self.log_id(term), len)?;
        if region.len() < len {
            return Err(Error::Config(format!(
                "dare: log region of {} bytes, need {len}",
                region.len()
            )));
        }
        // Whoever leads the term replicates into it: any other member, no one else.
        let others = self.members.iter().copied().filter(|m| *m != self.me);
        let grants = spindle_transport_rdma::PeerWrites::whole_to(others, region.len())?;
        region.limit_peer_writes(grants)?;
        if self.log_key.is_some() {
            // The old region is withdrawn: nothing more lands in it; copy it over.
            let bytes = self.log.to_vec(0, len)?;
            region.write_bytes(0, &bytes)?;
        }
        self.log = region;
        self.log_key = Some(term);
        self.term = term;
        self.voted_for = None;
        self.role = DareRole::Follower { leader: None };
        self.leader = None;
        self.hello_sent = false;
        self.heard_us = now_us;
        let base = self.config.election_timeout_us;
        self.timeout_us = (base + splitmix(&mut self.rng) % base) << self.backoff;
        Ok(())
    }

    fn read_heartbeats(&mut self, now_us: u64, rekey: &mut Rekey<'_>) -> Result<bool> {
        let mut work = false;
        for j in 0..self.members.len() {
            if j == self.rank || self.failed[j] {
                continue;
            }
            let word = self.ctrl.load_u64(self.ctrl_layout.hb(j));
            if word == self.last_hb[j] {
                continue;
            }
            self.last_hb[j] = word;
            let (t, _) = unpack(word);
            if t < self.term {
                continue;
            }
            work = true;
            if t > self.term {
                self.adopt(t, now_us, rekey)?;
            }
            // At most one leader per term: each needed a majority of votes, and a member
            // votes once per term. The word is another member's, so a second leader's
            // heartbeat of this term is not ours to assert against: a peer broke the
            // protocol (DARE assumes fail-stop members), and which of the two leads —
            // whose writes land in this term's log region — cannot be told. Following
            // either could deliver an order the others do not; the member stops.
            if self.role == DareRole::Leader {
                return Err(Error::Protocol(format!(
                    "dare: node {}: two leaders in term {t}: this node and node {} (its \
                     heartbeat word {word:#x})",
                    self.me, self.members[j]
                )));
            }
            if let DareRole::Follower { leader: Some(l) } = self.role {
                if l != j {
                    return Err(Error::Protocol(format!(
                        "dare: node {}: two leaders in term {t}: node {} and node {} (its \
                         heartbeat word {word:#x})",
                        self.me, self.members[l], self.members[j]
                    )));
                }
            }
            self.role = DareRole::Follower { leader: Some(j) };
            self.heard_us = now_us;
            self.backoff = 0;
        }
        Ok(work)
    }

    /// This member's log: `(tail index, log term)`, the log term being the term of the
    /// leader that last wrote `tail` (Viewstamped Replication's "last normal view"): the
    /// log up to `tail` is a prefix of that leader's log.
    fn last_entry(&self) -> (u64, u64) {
        let (term, tail) = unpack(self.log.load_u64(LOG_TAIL_OFFSET));
        (tail, term)
    }

    fn read_vote_requests(&mut self, now_us: u64, rekey: &mut Rekey<'_>) -> Result<bool> {
        let mut work = false;
        for j in 0..self.members.len() {
            if j == self.rank || self.failed[j] {
                continue;
            }
            let at = self.ctrl_layout.vote_req(j);
            let t = self.ctrl.load_u64(at + 2 * WORD_BYTES);
            if t == 0 || t < self.term {
                continue;
            }
            if t > self.term {
                self.adopt(t, now_us, rekey)?;
                work = true;
            }
            if self.role != (DareRole::Follower { leader: None }) || self.voted_for.is_some() {
                continue;
            }
            let cand = (self.ctrl.load_u64(at + WORD_BYTES), self.ctrl.load_u64(at));
            let (my_index, my_term) = self.last_entry();
            if cand >= (my_term, my_index) {
                self.voted_for = Some(j);
                self.heard_us = now_us;
                let off = self.ctrl_layout.grant(self.rank);
                self.write_word(j, off, t);
                work = true;
            }
        }
        Ok(work)
    }

    fn count_votes(&mut self, now_us: u64) -> Result<bool> {
        let votes = 1
            + (0..self.members.len())
                .filter(|&j| {
                    j != self.rank && self.ctrl.load_u64(self.ctrl_layout.grant(j)) == self.term
                })
                .count();
        if votes < self.majority() {
            return Ok(false);
        }
        self.become_leader(now_us)?;
        Ok(true)
    }

    fn become_leader(&mut self, now_us: u64) -> Result<()> {
        let n = self.members.len();
        self.role = DareRole::Leader;
        self.backoff = 0;
        let mut appended_seq = self.delivered_seq.clone();
        let (tail, _) = self.last_entry();
        for k in self.applied + 1..=tail {
            let e = self.read_entry(k)?;
            let s = e.sender as usize;
            appended_seq[s] = appended_seq[s].max(e.sender_seq);
        }
        let replicas = (0..n)
            .map(|j| {
                if j == self.rank || self.failed[j] {
                    Replica::Out
                } else {
                    Replica::Waiting
                }
            })
            .collect();
        self.leader = Some(LeaderState {
            replicas,
            inbox: vec![VecDeque::new(); n],
            appended_seq,
            hb_counter: 0,
            hb_sent_us: 0,
            elected_tail: tail,
        });
        // The log term is now this term: the leader's log is its own.
        self.log.store_u64(LOG_TAIL_OFFSET, pack(self.term, tail));
        self.events
            .push_back(DareEvent::Elected { term: self.term });
        self.heartbeat(now_us);
        Ok(())
    }

    fn heartbeat(&mut self, now_us: u64) {
        let Some(l) = &mut self.leader else { return };
        l.hb_counter = (l.hb_counter + 1) & DARE_INDEX_MAX;
        l.hb_sent_us = now_us;
        let word = pack(self.term, l.hb_counter);
        let off = self.ctrl_layout.hb(self.rank);
        for j in 0..self.members.len() {
            if j != self.rank && !self.failed[j] {
                self.write_word(j, off, word);
            }
        }
    }

    fn check_timers(&mut self, now_us: u64, rekey: &mut Rekey<'_>) -> Result<bool> {
        match self.role {
            DareRole::Leader => {
                let due = self
                    .leader
                    .as_ref()
                    .is_some_and(|l| now_us >= l.hb_sent_us + self.config.heartbeat_us);
                if due {
                    self.heartbeat(now_us);
                }
                Ok(due)
            }
            DareRole::Follower { leader } => {
                if leader.is_some_and(|l| self.failed[l]) {
                    // The fabric reported the leader gone: stand after `rank` heartbeat
                    // periods rather than all at once (split votes would cost a whole
                    // election time-out); a lower-ranked candidate's request comes first.
                    self.role = DareRole::Follower { leader: None };
                    self.heard_us = (now_us + self.rank as u64 * self.config.heartbeat_us)
                        .saturating_sub(self.timeout_us);
                    return Ok(true);
                }
                if now_us >= self.heard_us + self.timeout_us {
                    self.start_election(now_us, rekey)?;
                    return Ok(true);
                }
                Ok(false)
            }
            DareRole::Candidate => {
                if now_us >= self.heard_us + self.timeout_us {
                    self.start_election(now_us, rekey)?;
                    return Ok(true);
                }
                Ok(false)
            }
        }
    }

    fn start_election(&mut self, now_us: u64, rekey: &mut Rekey<'_>) -> Result<()> {
        self.backoff = (self.backoff + 1).min(DARE_ELECTION_BACKOFF_SHIFT_MAX);
        self.adopt(self.term + 1, now_us, rekey)?;
        self.role = DareRole::Candidate;
        self.voted_for = Some(self.rank);
        let (index, term) = self.last_entry();
        let off = self.ctrl_layout.vote_req(self.rank);
        let mut bytes = Vec::with_capacity(2 * WORD_BYTES);
        bytes.extend_from_slice(&index.to_le_bytes());
        bytes.extend_from_slice(&term.to_le_bytes());
        for j in 0..self.members.len() {
            if j != self.rank && !self.failed[j] {
                self.out.push_back(DareOut::Write {
                    peer: self.members[j],
                    region: self.ctrl_id,
                    offset: off,
                    bytes: bytes.clone(),
                    guard: Some((off + 2 * WORD_BYTES, self.term)),
                });
            }
        }
        // Alone (or with every peer failed) a member is its own majority only if the
        // group has one member.
        self.count_votes(now_us)?;
        Ok(())
    }

    fn read_entry(&self, index: u64) -> Result<Entry> {
        let at = self.log_layout.slot(index);
        let got = self.log.load_u64(at);
        if got != index {
            return Err(Error::Protocol(format!(
                "dare: node {} log slot of index {index} holds index {got}",
                self.me
            )));
        }
        let term = self.log.load_u64(at + WORD_BYTES);
        let meta = self.log.load_u64(at + 2 * WORD_BYTES);
        let sender_seq = self.log.load_u64(at + 3 * WORD_BYTES);
        let sender = (meta >> 32) as u32;
        let len = (meta & 0xffff_ffff) as usize;
        if len > self.config.payload_bytes_max || sender as usize >= self.members.len() {
            return Err(Error::Protocol(format!(
                "dare: node {} log entry {index}: sender rank {sender}, {len} bytes",
                self.me
            )));
        }
        let payload = self.log.to_vec(at + ENTRY_HEADER_BYTES, len)?;
        Ok(Entry {
            index,
            term,
            sender,
            sender_seq,
            payload,
        })
    }

    fn entry_bytes(e: &Entry) -> Vec<u8> {
        let mut b = Vec::with_capacity(ENTRY_HEADER_BYTES + e.payload.len());
        b.extend_from_slice(&e.index.to_le_bytes());
        b.extend_from_slice(&e.term.to_le_bytes());
        let meta = (u64::from(e.sender) << 32) | e.payload.len() as u64;
        b.extend_from_slice(&meta.to_le_bytes());
        b.extend_from_slice(&e.sender_seq.to_le_bytes());
        b.extend_from_slice(&e.payload);
        b
    }

    /// Follower: `hello` to a new leader, acknowledgements of `tail`.
    fn follow(&mut self) -> Result<bool> {
        let DareRole::Follower { leader: Some(l) } = self.role else {
            return Ok(false);
        };
        if self.failed[l] {
            return Ok(false);
        }
        let mut work = false;
        if !self.hello_sent {
            self.hello_sent = true;
            let commit = self.log.load_u64(LOG_COMMIT_OFFSET);
            // `applied` first: the leader reads it when it sees `hello` (issue order).
            let applied = self.applied;
            let (off_ack, off_hello) = (
                self.ctrl_layout.ack(self.rank),
                self.ctrl_layout.hello(self.rank),
            );
            let mut bytes = pack(0, 0).to_le_bytes().to_vec();
            bytes.extend_from_slice(&applied.to_le_bytes());
            self.write(l, self.ctrl_id, off_ack, bytes);
            self.write_word(l, off_hello, pack(self.term, commit));
            self.acked = (0, applied);
            work = true;
        }
        let (t, tail) = unpack(self.log.load_u64(LOG_TAIL_OFFSET));
        let tail = if t == self.term { tail } else { 0 };
        if tail > self.acked.0 || self.applied > self.acked.1 {
            self.acked = (tail.max(self.acked.0), self.applied);
            let mut bytes = pack(self.term, self.acked.0).to_le_bytes().to_vec();
            bytes.extend_from_slice(&self.applied.to_le_bytes());
            let off = self.ctrl_layout.ack(self.rank);
            self.write(l, self.ctrl_id, off, bytes);
            work = true;
        }
        Ok(work)
    }

    /// Leader: appends, adjusts and replicates, commits.
    fn lead(&mut self, now_us: u64) -> Result<bool> {
        let _ = now_us;
        let mut work = false;
        let n = self.members.len();
        let Some(mut l) = self.leader.take() else {
            return Ok(false);
        };
        let (mut tail, _) = self.last_entry();
        // Slots free everywhere that matters: index k may be written once every member
        // still replicated has delivered k - log_entries.
        let mut floor = self.applied;
        for j in 0..n {
            if j != self.rank && l.replicas[j] != Replica::Out {
                floor = floor.min(self.ctrl.load_u64(self.ctrl_layout.applied(j)));
            }
        }
        let cap = self.config.log_entries as u64;
        // Messages from the inboxes, round-robin over senders.
        'fill: loop {
            let mut any = false;
            for s in 0..n {
                if tail + 1 > floor + cap {
                    break 'fill;
                }
                while let Some((seq, _)) = l.inbox[s].front() {
                    if *seq <= l.appended_seq[s] {
                        l.inbox[s].pop_front();
                    } else {
                        break;
                    }
                }
                let Some((seq, _)) = l.inbox[s].front() else {
                    continue;
                };
                if *seq != l.appended_seq[s] + 1 {
                    // A gap (a message lost with a failed leader's link): wait for the
                    // sender to re-send from its oldest undelivered message.
                    l.inbox[s].clear();
                    continue;
                }
                let (seq, payload) = l.inbox[s].pop_front().expect("front seen");
                tail += 1;
                l.appended_seq[s] = seq;
                self.append_local(&Entry {
                    index: tail,
                    term: self.term,
                    sender: s as u32,
                    sender_seq: seq,
                    payload,
                })?;
                any = true;
                work = true;
            }
            if !any {
                break;
            }
        }
        // Followers: adjust on hello, then stream.
        for j in 0..n {
            match l.replicas[j] {
                Replica::Out => {}
                Replica::Waiting => {
                    let (t, commit) = unpack(self.ctrl.load_u64(self.ctrl_layout.hello(j)));
                    if t != self.term || self.log_announced[j] != Some(self.term) {
                        // No hello in this term yet, or the follower's log region for
                        // this term not yet announced here (writes into it would be
                        // refused): wait.
                        continue;
                    }
                    let applied = self.ctrl.load_u64(self.ctrl_layout.applied(j));
                    // `applied` is the follower's word: saturate, not overflow.
                    if applied.saturating_add(cap) < tail || commit < applied {
                        l.replicas[j] = Replica::Out;
                        self.events.push_back(DareEvent::Lagging {
                            peer: self.members[j],
                        });
                    } else {
                        l.replicas[j] = Replica::Synced {
                            next: commit + 1,
                            commit_sent: commit,
                        };
                        if commit == tail {
                            // Nothing to rewrite: the tail word alone makes its log this
                            // leader's (and lets it acknowledge, so that entries of
                            // earlier terms commit without new traffic).
                            self.write(
                                j,
                                self.log_id(self.term),
                                LOG_TAIL_OFFSET,
                                pack(self.term, tail).to_le_bytes().to_vec(),
                            );
                        }
                    }
                    work = true;
                }
                Replica::Synced { .. } => {}
            }
            if let Replica::Synced { next, commit_sent } = l.replicas[j] {
                if next <= tail {
                    // Log adjustment is not cut into batches: the `tail` word makes the
                    // follower's log term this term, and votes rank a log by (log term,
                    // tail). A follower holding only part of this leader's elected log
                    // under a new-term `tail` (say up to 67 of 200 committed entries)
                    // would outrank a member holding all 200 and could be elected without
                    // entries 68-200. Up to `elected_tail` everything goes at once, so
                    // a new-term `tail` always covers every committed entry.
                    let last = if next <= l.elected_tail {
                        tail
                    } else {
                        tail.min(next + DARE_REPLICATE_BATCH_MAX as u64 - 1)
                    };
                    let region = self.log_id(self.term);
                    for k in next..=last {
                        let e = self.read_entry(k)?;
                        let at = self.log_layout.slot(k);
                        self.write(j, region, at, Self::entry_bytes(&e));
                    }
                    self.write(
                        j,
                        region,
                        LOG_TAIL_OFFSET,
                        pack(self.term, last).to_le_bytes().to_vec(),
                    );
                    l.replicas[j] = Replica::Synced {
                        next: last + 1,
                        commit_sent,
                    };
                    work = true;
                }
            }
        }
        // Commit: the majority-th highest tail held in this term.
        let mut held: Vec<u64> = vec![tail];
        for j in 0..n {
            if j != self.rank && !self.failed[j] {
                let (t, index) = unpack(self.ctrl.load_u64(self.ctrl_layout.ack(j)));
                if t == self.term {
                    held.push(index);
                }
            }
        }
        held.sort_unstable_by(|a, b| b.cmp(a));
        let mut commit = self.log.load_u64(LOG_COMMIT_OFFSET);
        if let Some(&c) = held.get(self.majority() - 1) {
            if c > commit {
                for k in commit + 1..=c {
                    let e = self.read_entry(k)?;
                    self.events.push_back(DareEvent::Committed {
                        index: k,
                        entry_term: e.term,
                        sender: self.members[e.sender as usize],
                        sender_seq: e.sender_seq,
                    });
                }
                commit = c;
                self.log.store_u64(LOG_COMMIT_OFFSET, commit);
                work = true;
            }
        }
        for j in 0..n {
            if let Replica::Synced { next, commit_sent } = l.replicas[j] {
                let c = commit.min(next - 1);
                if c > commit_sent {
                    self.write(
                        j,
                        self.log_id(self.term),
                        LOG_COMMIT_OFFSET,
                        c.to_le_bytes().to_vec(),
                    );
                    l.replicas[j] = Replica::Synced {
                        next,
                        commit_sent: c,
                    };
                }
            }
        }
        self.leader = Some(l);
        Ok(work)
    }

    fn append_local(&mut self, e: &Entry) -> Result<()> {
        // Invariant: the slot is free — the entry it held was delivered here.
        assert!(
            e.index <= self.applied + self.config.log_entries as u64,
            "dare: slot of {} still holds an undelivered entry",
            e.index
        );
        self.log
            .write_bytes(self.log_layout.slot(e.index), &Self::entry_bytes(e))?;
        self.log
            .store_u64(LOG_TAIL_OFFSET, pack(self.term, e.index));
        Ok(())
    }

    /// Delivers the log up to `commit`, in order. The entries and `commit` are the
    /// leader's writes into this member's log: an entry out of its sender's sequence
    /// (senders re-send from their oldest undelivered, leaders drop duplicates, so a
    /// correct leader never writes one), or an own message this member does not hold as
    /// the next pending, is an error naming the entry (as [`DareNode::catch_up`] rejects
    /// them), and nothing is delivered from it on.
    fn deliver(&mut self) -> Result<bool> {
        let commit = self.log.load_u64(LOG_COMMIT_OFFSET);
        let mut work = false;
        while self.applied < commit {
            let k = self.applied + 1;
            let e = self.read_entry(k)?;
            let s = e.sender as usize;
            let expected = self.delivered_seq[s] + 1;
            if e.sender_seq != expected {
                return Err(Error::Protocol(format!(
                    "dare: node {}: committed entry {k} (term {}) is message {} of node {}, \
                     expected {expected}",
                    self.me, e.term, e.sender_seq, self.members[s]
                )));
            }
            if s == self.rank {
                let next = self.pending.front().map(|p| p.0);
                if next != Some(e.sender_seq) {
                    return Err(Error::Protocol(format!(
                        "dare: node {}: committed entry {k} (term {}) is own message {}, not \
                         the next pending ({next:?})",
                        self.me, e.term, e.sender_seq
                    )));
                }
                self.pending.pop_front();
                self.pending_sent = self.pending_sent.saturating_sub(1);
            }
            self.applied = k;
            work = true;
            self.delivered_seq[s] = e.sender_seq;
            self.deliveries.push_back(DareDelivery {
                index: k,
                term: e.term,
                sender: self.members[s],
                sender_seq: e.sender_seq,
                payload: e.payload,
            });
        }
        Ok(work)
    }

    /// Sender: hands undelivered messages to the current leader.
    fn hand_over(&mut self) -> bool {
        let leader = match self.role {
            DareRole::Leader => self.rank,
            DareRole::Follower { leader: Some(l) } if !self.failed[l] => l,
            _ => return false,
        };
        if self.sent_to != Some((self.term, leader)) {
            self.sent_to = Some((self.term, leader));
            self.pending_sent = 0;
        }
        if self.pending_sent >= self.pending.len() {
            return false;
        }
        for (seq, payload) in self.pending.iter().skip(self.pending_sent) {
            if leader == self.rank {
                let l = self.leader.as_mut().expect("leader state");
                if *seq > l.appended_seq[self.rank] {
                    l.inbox[self.rank].push_back((*seq, payload.clone()));
                }
            } else {
                let mut bytes = Vec::with_capacity(DARE_SEND_HEADER_BYTES + payload.len());
                bytes.extend_from_slice(&seq.to_le_bytes());
                bytes.extend_from_slice(payload);
                self.out.push_back(DareOut::Send {
                    peer: self.members[leader],
                    bytes,
                });
            }
        }
        self.pending_sent = self.pending.len();
        true
    }
}

#[cfg(test)]
mod tests;
