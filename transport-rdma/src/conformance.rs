//! The conformance suite every backend must pass: contract items 1–10 of the crate docs.
//!
//! A backend plugs in through a [`Harness`]: how to open an endpoint, how to make progress
//! (the simulator steps its world; real backends just let their threads run), and whether
//! it can crash a peer. [`run_all`] runs every check; each check is also a public function
//! so a backend's test file can name them one by one.
//!
//! The data checks are [`Workload`]s with two halves: the *issue* half performs writes and
//! sends on one endpoint, the *check* half observes the other endpoint's region and events
//! and asserts the contract on everything it sees while the writes are still landing. With
//! a concurrent harness the halves run on two threads; with the simulator they interleave
//! with world steps; across processes ([`run_peer_role`]) the issue half runs in another
//! process. Every workload is deterministic, so both processes agree on what to expect.
//!
//! ```
//! use std::sync::Arc;
//! use spindle_transport_rdma::conformance::{self, Harness};
//! use spindle_transport_rdma::{open_backend, Endpoint, FabricConfig, NodeId};
//!
//! /// Real tcp endpoints, as threads of this process.
//! struct Tcp;
//! impl Harness for Tcp {
//!     fn name(&self) -> String { "tcp".into() }
//!     fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint> {
//!         open_backend("tcp", node, cfg).expect("tcp endpoint on loopback")
//!     }
//! }
//! conformance::check_send_recv(&mut Tcp);
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{
    Endpoint, Error, Event, FabricConfig, FailureReason, NodeId, Region, RegionId,
    REGION_BYTES_MAX, SEND_BYTES_MAX, WRITE_BYTES_MAX,
};

mod peer_writes;
pub use peer_writes::check_peer_writes;
/// Wall-clock bound after which a check gives up waiting for something to happen. It is
/// a liveness bound that turns a hang into a clear failure, not a timing assertion.
pub const GIVE_UP: Duration = Duration::from_secs(60);

/// How a backend is driven by the suite.
pub trait Harness {
    /// Name printed in failures (include the seed for seeded backends).
    fn name(&self) -> String;

    /// Opens an endpoint for `node`. The suite never reuses a node id within one harness.
    fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint>;

    /// Lets the fabric make progress. Real backends progress on their own threads; the
    /// default parks briefly. The simulator applies due deliveries here.
    fn progress(&mut self) {
        std::thread::sleep(Duration::from_micros(200));
    }

    /// Whether the two halves of a workload run on two threads (real backends) or are
    /// interleaved with [`Harness::progress`] on one thread (the simulator).
    fn concurrent(&self) -> bool {
        true
    }

    /// Makes `node` fail abruptly (no goodbye), if the harness can; returns false if it
    /// cannot (real crashes are then tested across processes).
    fn crash(&mut self, _node: NodeId) -> bool {
        false
    }
}

/// Node ids handed out to checks; distinct across checks so one harness can host them all.
static NEXT_NODE: AtomicU32 = AtomicU32::new(100);

fn fresh_node() -> NodeId {
    NEXT_NODE.fetch_add(1, Ordering::Relaxed)
}

/// An endpoint plus the events polled from it so far.
struct Node {
    ep: Arc<dyn Endpoint>,
    events: Vec<Event>,
}

impl Node {
    fn open(h: &mut dyn Harness) -> Node {
        Node {
            ep: h.open(fresh_node(), contract_config()),
            events: Vec::new(),
        }
    }

    fn id(&self) -> NodeId {
        self.ep.node()
    }

    fn pump(&mut self) {
        while let Some(event) = self.ep.poll_event() {
            self.events.push(event);
        }
    }

    fn failed(&self, peer: NodeId) -> Option<&FailureReason> {
        self.events.iter().find_map(|e| match e {
            Event::PeerFailed { peer: p, reason } if *p == peer => Some(reason),
            _ => None,
        })
    }
}

/// Pumps events and progresses until `done` holds; panics naming the check on give-up.
fn drive_until(
    h: &mut dyn Harness,
    nodes: &mut [&mut Node],
    what: &str,
    mut done: impl FnMut(&mut [&mut Node]) -> bool,
) {
    let start = Instant::now();
    loop {
        for node in nodes.iter_mut() {
            node.pump();
        }
        if done(nodes) {
            return;
        }
        if start.elapsed() > GIVE_UP {
            let seen: Vec<String> = nodes
                .iter()
                .map(|n| {
                    let tail = n.events.len().saturating_sub(5);
                    let recent: Vec<String> = n.events[tail..].iter().map(summarize).collect();
                    format!("node {} last events {recent:?}", n.id())
                })
                .collect();
            panic!(
                "{}: gave up waiting for {what}; {}",
                h.name(),
                seen.join("; ")
            );
        }
        h.progress();
    }
}

/// An event, without its payload bytes.
fn summarize(event: &Event) -> String {
    match event {
        Event::Recv { peer, imm, data } => {
            format!("Recv {{ peer: {peer}, imm: {imm}, {} bytes }}", data.len())
        }
        other => format!("{other:?}"),
    }
}

/// Links `a` to `b` (a connects) and waits until both see the link and `b`'s regions.
fn link(h: &mut dyn Harness, a: &mut Node, b: &mut Node, regions_of_b: &[RegionId]) {
    let (ida, idb) = (a.id(), b.id());
    a.ep.connect(idb, &b.ep.address())
        .unwrap_or_else(|e| panic!("{}: connect {ida}->{idb}: {e}", h.name()));
    drive_until(h, &mut [a, b], "the link to come up at both ends", |n| {
        let up = |node: &Node, peer| {
            node.events
                .iter()
                .any(|e| matches!(e, Event::PeerConnected { peer: p } if *p == peer))
        };
        up(n[0], idb)
            && up(n[1], ida)
            && regions_of_b
                .iter()
                .all(|r| n[0].ep.remote_region(idb, *r).is_some())
    });
}

/// Retries an operation while the outbound queue is full.
fn retry(ep: &dyn Endpoint, what: &str, mut op: impl FnMut() -> Result<(), Error>) {
    let start = Instant::now();
    loop {
        match op() {
            Ok(()) => return,
            Err(Error::QueueFull { .. }) if start.elapsed() < GIVE_UP => {
                ep.wait(Duration::from_millis(1));
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// What a workload's issue half did in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issued {
    /// Issued one or more operations; call again.
    More,
    /// The outbound queue was full; call again after some progress.
    Busy,
    /// Everything is issued.
    Done,
}

/// A deterministic data check: `issue` runs on the writing endpoint, `check` observes the
/// target's region and events. Both halves are built from the same parameters.
pub trait Workload: Send {
    /// Name for failure messages.
    fn name(&self) -> &'static str;
    /// Length of the target region the workload writes into (region id [`WORKLOAD_REGION`]).
    fn region_len(&self) -> usize;
    /// Issues the next operation(s) from `ep` to `target`.
    fn issue(&mut self, ep: &dyn Endpoint, target: NodeId) -> Issued;
    /// Checks what is visible now; returns Ok(true) once the final state has been seen,
    /// Err with the violated rule otherwise.
    fn check(&mut self, region: &Region, events: &mut Vec<Event>) -> Result<bool, String>;
}

/// The fabric settings of the contract's endpoints: the defaults, with the failure
/// detector's floor at the ceiling. The contract is not about how soon a hung peer is
/// suspected, and its workloads keep a libfabric/verbs progress thread (which also sends
/// those backends' probes) busy for longer than the default floor on a loaded machine.
pub fn contract_config() -> FabricConfig {
    let d = FabricConfig::default();
    FabricConfig {
        suspect_floor_ms: d.suspect_ceiling_ms,
        ..d
    }
}

/// Region id workloads write into.
pub const WORKLOAD_REGION: RegionId = 7;

fn issue_op(result: Result<(), Error>, what: &str) -> Issued {
    match result {
        Ok(()) => Issued::More,
        Err(Error::QueueFull { .. }) => Issued::Busy,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// FIFO (contract item 2): data words then a counter, as separate writes. A reader that
/// sees the counter at `c` must see, in every slot, the value of the newest write `<= c`
/// to that slot (or a newer one).
#[derive(Debug, Clone)]
pub struct FifoWorkload {
    writes: u64,
    next: u64,
    data_done: bool,
    seen: u64,
}

/// Slots of [`FifoWorkload`].
const FIFO_SLOTS: u64 = 32;

impl FifoWorkload {
    /// A FIFO check of `writes` writes.
    pub fn new(writes: u64) -> Self {
        FifoWorkload {
            writes,
            next: 1,
            data_done: false,
            seen: 0,
        }
    }
    fn slot_offset(i: u64) -> usize {
        8 + 8 * (i % FIFO_SLOTS) as usize
    }
}

impl Workload for FifoWorkload {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn region_len(&self) -> usize {
        8 + 8 * FIFO_SLOTS as usize
    }
    fn issue(&mut self, ep: &dyn Endpoint, target: NodeId) -> Issued {
        if self.next > self.writes {
            return Issued::Done;
        }
        let i = self.next;
        let offset = if self.data_done {
            0
        } else {
            Self::slot_offset(i)
        };
        match issue_op(
            ep.write(target, WORKLOAD_REGION, offset, &i.to_le_bytes()),
            "fifo write",
        ) {
            Issued::More if self.data_done => {
                self.data_done = false;
                self.next += 1;
                Issued::More
            }
            Issued::More => {
                self.data_done = true;
                Issued::More
            }
            other => other,
        }
    }
    fn check(&mut self, region: &Region, _events: &mut Vec<Event>) -> Result<bool, String> {
        let c = region.load_u64(0);
        if c < self.seen {
            return Err(format!("counter went back from {} to {c}", self.seen));
        }
        if c > self.writes {
            return Err(format!(
                "counter {c} beyond the {} writes issued",
                self.writes
            ));
        }
        self.seen = c;
        for s in 0..FIFO_SLOTS.min(c) {
            // Newest write <= c to slot s (0: none yet).
            let newest = c - ((c - s) % FIFO_SLOTS);
            let v = region.load_u64(Self::slot_offset(s));
            if v < newest || v % FIFO_SLOTS != s || v > self.writes {
                return Err(format!(
                    "counter {c} visible but slot {s} holds {v} (expected >= {newest}): \
                     writes applied out of order"
                ));
            }
        }
        Ok(c == self.writes)
    }
}

/// Untorn words (contract item 2): each write fills aligned words with one repeated byte;
/// every word ever read must consist of one repeated byte.
#[derive(Debug, Clone)]
pub struct TornWorkload {
    writes: u64,
    next: u64,
    last_seen: bool,
}

/// Words rewritten by [`TornWorkload`] (a 16-byte write covers two of them).
const TORN_WORDS: usize = 8;

impl TornWorkload {
    /// A torn-word check of `writes` writes.
    pub fn new(writes: u64) -> Self {
        TornWorkload {
            writes,
            next: 1,
            last_seen: false,
        }
    }
    fn fill(i: u64) -> u8 {
        (i % 255 + 1) as u8
    }
}

impl Workload for TornWorkload {
    fn name(&self) -> &'static str {
        "untorn words"
    }
    fn region_len(&self) -> usize {
        8 * TORN_WORDS + 8
    }
    fn issue(&mut self, ep: &dyn Endpoint, target: NodeId) -> Issued {
        if self.next > self.writes {
            return Issued::Done;
        }
        let i = self.next;
        let fill = Self::fill(i);
        // Alternate 8-byte and 16-byte writes at word-aligned offsets; the last write
        // marks completion in a separate word.
        let (offset, len) = if i % 2 == 0 {
            (8 * (i as usize % TORN_WORDS), 8)
        } else {
            (8 * (i as usize % (TORN_WORDS - 1)), 16)
        };
        let result = if i == self.writes {
            ep.write_then_release(
                target,
                WORKLOAD_REGION,
                offset,
                &vec![fill; len],
                8 * TORN_WORDS,
                i,
            )
        } else {
            ep.write(target, WORKLOAD_REGION, offset, &vec![fill; len])
        };
        let issued = issue_op(result, "torn-word write");
        if issued == Issued::More {
            self.next += 1;
        }
        issued
    }
    fn check(&mut self, region: &Region, _events: &mut Vec<Event>) -> Result<bool, String> {
        for w in 0..TORN_WORDS {
            let bytes = region.load_u64(8 * w).to_ne_bytes();
            if bytes.iter().any(|b| *b != bytes[0]) {
                return Err(format!("word {w} torn: {bytes:02x?}"));
            }
        }
        if region.load_u64(8 * TORN_WORDS) == self.writes {
            self.last_seen = true;
        }
        Ok(self.last_seen)
    }
}

/// Payload then guard (contract item 3): generation `g` fills a payload with byte `g` and
/// releases guard `g`; a reader that sees guard `g` must see no payload byte older than `g`.
#[derive(Debug, Clone)]
pub struct GuardWorkload {
    generations: u64,
    payload_len: usize,
    next: u64,
}

impl GuardWorkload {
    /// `generations` guarded payloads of `payload_len` bytes each (at most 250 generations,
    /// so a generation fits in the byte it fills).
    pub fn new(generations: u64, payload_len: usize) -> Self {
        assert!(
            generations <= 250,
            "a generation must fit in one payload byte"
        );
        GuardWorkload {
            generations,
            payload_len,
            next: 1,
        }
    }
}

impl Workload for GuardWorkload {
    fn name(&self) -> &'static str {
        "payload then guard"
    }
    fn region_len(&self) -> usize {
        8 + self.payload_len
    }
    fn issue(&mut self, ep: &dyn Endpoint, target: NodeId) -> Issued {
        if self.next > self.generations {
            return Issued::Done;
        }
        let g = self.next;
        let payload = vec![g as u8; self.payload_len];
        let issued = issue_op(
            ep.write_then_release(target, WORKLOAD_REGION, 8, &payload, 0, g),
            "guarded write",
        );
        if issued == Issued::More {
            self.next += 1;
        }
        issued
    }
    fn check(&mut self, region: &Region, _events: &mut Vec<Event>) -> Result<bool, String> {
        let Some((g, _)) = guarded_payload(
            region,
            self.payload_len,
            "guard released before its payload",
        )?
        else {
            return Ok(false);
        };
        Ok(g == self.generations)
    }
}

/// Writes from a local region (contract item 9): generation `g` fills its own range of a
/// local source region with byte `g` — at word phase `g % 8`, so most generations are
/// copied across word phases and some along them — and writes it with
/// [`Endpoint::write_from`] to the peer's payload, then guard `g`: with the write's own
/// guard on even generations, as a plain write after it (FIFO) on odd ones. A reader that
/// sees guard `g` must see no payload byte older than `g`, and at the end exactly the last
/// generation's bytes. A local range past its region is an error, not a panic.
#[derive(Debug)]
pub struct WriteFromWorkload {
    generations: u64,
    payload_len: usize,
    next: u64,
    /// The generation whose payload went out and whose separate guard write is pending.
    payload_sent: bool,
    source: Option<Region>,
}

impl WriteFromWorkload {
    /// `generations` payloads of `payload_len` bytes (at most 250 generations, so a
    /// generation fits in the byte it fills).
    pub fn new(generations: u64, payload_len: usize) -> Self {
        assert!(
            generations <= 250,
            "a generation must fit in one payload byte"
        );
        WriteFromWorkload {
            generations,
            payload_len,
            next: 1,
            payload_sent: false,
            source: None,
        }
    }

    /// Where generation `g`'s bytes start in the source region.
    fn source_offset(&self, g: u64) -> usize {
        (g as usize - 1) * (self.payload_len + 16) + (g % 8) as usize
    }
}

impl Workload for WriteFromWorkload {
    fn name(&self) -> &'static str {
        "write from a local region"
    }
    fn region_len(&self) -> usize {
        8 + self.payload_len
    }
    fn issue(&mut self, ep: &dyn Endpoint, target: NodeId) -> Issued {
        if self.next > self.generations {
            return Issued::Done;
        }
        if self.source.is_none() {
            let len = self.generations as usize * (self.payload_len + 16);
            let source = Region::new_heap(0, len).expect("a local source region");
            for g in 1..=self.generations {
                let bytes = vec![g as u8; self.payload_len];
                source
                    .write_bytes(self.source_offset(g), &bytes)
                    .expect("source ranges inside the source region");
            }
            let past = crate::LocalRange {
                region: &source,
                offset: len - 4,
                len: 8,
            };
            assert!(
                matches!(
                    ep.write_from(target, WORKLOAD_REGION, 8, past, None),
                    Err(Error::OutOfBounds { .. })
                ),
                "a local range past its region must be OutOfBounds"
            );
            self.source = Some(source);
        }
        let g = self.next;
        let source = self.source.as_ref().expect("made above");
        let from = crate::LocalRange {
            region: source,
            offset: self.source_offset(g),
            len: self.payload_len,
        };
        let issued = if g % 2 == 0 {
            issue_op(
                ep.write_from(target, WORKLOAD_REGION, 8, from, Some((0, g))),
                "guarded write from a local region",
            )
        } else {
            if !self.payload_sent {
                match issue_op(
                    ep.write_from(target, WORKLOAD_REGION, 8, from, None),
                    "write from a local region",
                ) {
                    Issued::More => self.payload_sent = true,
                    other => return other,
                }
            }
            issue_op(
                ep.write(target, WORKLOAD_REGION, 0, &g.to_ne_bytes()),
                "guard write after a write from a local region",
            )
        };
        if issued == Issued::More {
            self.payload_sent = false;
            self.next += 1;
        }
        issued
    }
    fn check(&mut self, region: &Region, _events: &mut Vec<Event>) -> Result<bool, String> {
        let Some((g, payload)) = guarded_payload(
            region,
            self.payload_len,
            "a write from a local region landed after its guard",
        )?
        else {
            return Ok(false);
        };
        if g == self.generations {
            if let Some((at, b)) = payload
                .iter()
                .enumerate()
                .find(|(_, b)| u64::from(**b) != g)
            {
                return Err(format!(
                    "last generation {g}: payload byte {at} is {b}, not the source's bytes"
                ));
            }
        }
        Ok(g == self.generations)
    }
}

/// The guarded workloads' check: the guard word at 0 (generation `g`, 0 before the first)
/// and the `payload_len` bytes after it, none of which may be from a generation before
/// `g` (the payload lands before its guard). `None` before the first guard; `Err` names
/// the stale byte, then `what`.
fn guarded_payload(
    region: &Region,
    payload_len: usize,
    what: &str,
) -> Result<Option<(u64, Vec<u8>)>, String> {
    let g = region.load_u64(0);
    if g == 0 {
        return Ok(None);
    }
    let payload = region.to_vec(8, payload_len).map_err(|e| e.to_string())?;
    if let Some((at, b)) = payload.iter().enumerate().find(|(_, b)| u64::from(**b) < g) {
        return Err(format!(
            "guard {g} visible but payload byte {at} is from generation {b}: {what}"
        ));
    }
    Ok(Some((g, payload)))
}

/// Sends ordered with writes (contract item 5): write a marker, then send with immediate
/// `i`; at `Recv` of `i` the marker must be `>= i`, and receives come in order, intact.
#[derive(Debug, Clone)]
pub struct SendWorkload {
    messages: u32,
    next: u32,
    wrote_marker: bool,
    received: u32,
}

impl SendWorkload {
    /// `messages` sends of growing sizes.
    pub fn new(messages: u32) -> Self {
        SendWorkload {
            messages,
            next: 1,
            wrote_marker: false,
            received: 0,
        }
    }
    fn payload(i: u32) -> Vec<u8> {
        let len = [0usize, 1, 7, 8, 100, 4096, 65_536][i as usize % 7];
        (0..len)
            .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i) as u8)
            .collect()
    }
}

impl Workload for SendWorkload {
    fn name(&self) -> &'static str {
        "sends ordered with writes"
    }
    fn region_len(&self) -> usize {
        8
    }
    fn issue(&mut self, ep: &dyn Endpoint, target: NodeId) -> Issued {
        if self.next > self.messages {
            return Issued::Done;
        }
        let i = self.next;
        if !self.wrote_marker {
            let issued = issue_op(
                ep.write(target, WORKLOAD_REGION, 0, &u64::from(i).to_le_bytes()),
                "marker write",
            );
            if issued == Issued::More {
                self.wrote_marker = true;
            }
            return issued;
        }
        let issued = issue_op(ep.send(target, i, &Self::payload(i)), "send");
        if issued == Issued::More {
            self.wrote_marker = false;
            self.next += 1;
        }
        issued
    }
    fn check(&mut self, region: &Region, events: &mut Vec<Event>) -> Result<bool, String> {
        for event in events.drain(..) {
            if let Event::Recv { imm, data, .. } = event {
                let marker = region.load_u64(0);
                if imm != self.received + 1 {
                    return Err(format!("received immediate {imm} after {}", self.received));
                }
                if data != Self::payload(imm) {
                    return Err(format!(
                        "message {imm} arrived with wrong bytes ({} long)",
                        data.len()
                    ));
                }
                if marker < u64::from(imm) {
                    return Err(format!(
                        "message {imm} received before the write issued ahead of it (marker {marker})"
                    ));
                }
                self.received = imm;
            }
        }
        Ok(self.received == self.messages)
    }
}

/// The workloads of the suite, in the order [`run_all`] and [`run_peer_role`] use.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(FifoWorkload::new(20_000)),
        Box::new(TornWorkload::new(20_000)),
        Box::new(GuardWorkload::new(200, 32 * 1024)),
        Box::new(GuardWorkload::new(24, LARGE_GUARDED_PAYLOAD_BYTES)),
        Box::new(SendWorkload::new(300)),
        Box::new(WriteFromWorkload::new(120, WRITE_FROM_PAYLOAD_BYTES)),
    ]
}

/// Payload of the suite's large [`GuardWorkload`]: 256 KiB and 3 bytes, above the size
/// from which tcp reads a guarded payload straight into the region (a kernel copy, item
/// 3), and ending in a partial word.
const LARGE_GUARDED_PAYLOAD_BYTES: usize = 256 * 1024 + 3;

/// Payload of [`WriteFromWorkload`] in the suite: 32 KiB and 3 bytes, so every write ends
/// in a partial word.
const WRITE_FROM_PAYLOAD_BYTES: usize = 32 * 1024 + 3;

/// Runs one workload between two fresh endpoints of the harness.
pub fn check_workload(
    h: &mut dyn Harness,
    mut issue: Box<dyn Workload>,
    mut check: Box<dyn Workload>,
) {
    let mut a = Node::open(h);
    let mut b = Node::open(h);
    let region =
        b.ep.register_region(WORKLOAD_REGION, check.region_len())
            .unwrap_or_else(|e| panic!("{}: register: {e}", h.name()));
    link(h, &mut a, &mut b, &[WORKLOAD_REGION]);
    b.events.clear();
    let target = b.id();
    let name = format!("{}: {}", h.name(), check.name());
    let fail = |why: String| -> ! { panic!("{name}: {why}") };
    if h.concurrent() {
        std::thread::scope(|scope| {
            let ep = Arc::clone(&a.ep);
            let writer = scope.spawn(move || loop {
                match issue.issue(&*ep, target) {
                    Issued::Done => return,
                    Issued::More => {}
                    Issued::Busy => {
                        ep.wait(Duration::from_millis(1));
                    }
                }
            });
            let start = Instant::now();
            let mut writer = Some(writer);
            loop {
                b.pump();
                match check.check(&region, &mut b.events) {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(why) => fail(why),
                }
                if writer.as_ref().is_some_and(|w| w.is_finished()) {
                    let finished = writer.take().expect("checked just above");
                    finished
                        .join()
                        .unwrap_or_else(|_| fail("the writing thread panicked".into()));
                }
                if start.elapsed() > GIVE_UP {
                    fail("gave up waiting for the final state".into());
                }
                std::hint::spin_loop();
            }
            if let Some(writer) = writer {
                writer
                    .join()
                    .unwrap_or_else(|_| fail("the writing thread panicked".into()));
            }
        });
    } else {
        let start = Instant::now();
        let mut issuing = true;
        loop {
            for _ in 0..64 {
                if !issuing {
                    break;
                }
                match issue.issue(&*a.ep, target) {
                    Issued::Done => issuing = false,
                    Issued::More => {}
                    Issued::Busy => break,
                }
            }
            h.progress();
            b.pump();
            match check.check(&region, &mut b.events) {
                Ok(true) => break,
                Ok(false) => {}
                Err(why) => fail(why),
            }
            if start.elapsed() > GIVE_UP {
                fail("gave up waiting for the final state".into());
            }
        }
    }
    a.ep.close();
    b.ep.close();
}

/// FIFO order of writes to one peer.
pub fn check_fifo(h: &mut dyn Harness) {
    check_workload(
        h,
        Box::new(FifoWorkload::new(20_000)),
        Box::new(FifoWorkload::new(20_000)),
    );
}

/// Aligned 8-byte words are never torn.
pub fn check_untorn_words(h: &mut dyn Harness) {
    check_workload(
        h,
        Box::new(TornWorkload::new(20_000)),
        Box::new(TornWorkload::new(20_000)),
    );
}

/// A guard released by `write_then_release` publishes its payload: small payloads, and
/// large ones (which tcp reads from the socket straight into the region).
pub fn check_guard(h: &mut dyn Harness) {
    for (generations, len) in [(200, 32 * 1024), (24, LARGE_GUARDED_PAYLOAD_BYTES)] {
        let workload = || Box::new(GuardWorkload::new(generations, len));
        check_workload(h, workload(), workload());
    }
}

/// Sends arrive in order, intact, after the writes issued before them.
pub fn check_send_recv(h: &mut dyn Harness) {
    check_workload(
        h,
        Box::new(SendWorkload::new(300)),
        Box::new(SendWorkload::new(300)),
    );
}

/// `write_from` moves a local region's bytes like `write`, guard included (item 9).
pub fn check_write_from(h: &mut dyn Harness) {
    check_workload(
        h,
        Box::new(WriteFromWorkload::new(120, WRITE_FROM_PAYLOAD_BYTES)),
        Box::new(WriteFromWorkload::new(120, WRITE_FROM_PAYLOAD_BYTES)),
    );
}

/// Links come up from one side and from both sides at once; regions registered before
/// the link are known at `PeerConnected`, later ones are announced, withdrawn ones are
/// reported and then rejected.
pub fn check_links_and_regions(h: &mut dyn Harness) {
    let name = h.name();
    let mut a = Node::open(h);
    let mut b = Node::open(h);
    b.ep.register_region(1, 64)
        .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    link(h, &mut a, &mut b, &[1]);
    let desc =
        a.ep.remote_region(b.id(), 1)
            .expect("region known at PeerConnected");
    assert_eq!(
        (desc.node, desc.region),
        (b.id(), 1),
        "{name}: descriptor names the region"
    );
    assert!(
        desc.len >= 64,
        "{name}: descriptor length {} < 64",
        desc.len
    );
    assert_eq!(
        a.ep.peers(),
        vec![b.id()],
        "{name}: peers() lists the linked peer"
    );

    // Registered after the link: announced.
    b.ep.register_region(2, 128)
        .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    let idb = b.id();
    drive_until(h, &mut [&mut a], "a region announcement", |n| {
        n[0].events.iter().any(|e| {
            matches!(e, Event::RegionAnnounced { peer, region } if *peer == idb && region.region == 2)
        })
    });
    a.ep.write(idb, 2, 120, &[1; 8])
        .unwrap_or_else(|e| panic!("{name}: write to announced: {e}"));

    // Withdrawn: reported, then writes are rejected.
    b.ep.deregister_region(2)
        .unwrap_or_else(|e| panic!("{name}: deregister: {e}"));
    drive_until(h, &mut [&mut a], "a region withdrawal", |n| {
        n[0].events
            .iter()
            .any(|e| matches!(e, Event::RegionWithdrawn { peer, region: 2 } if *peer == idb))
    });
    assert!(
        a.ep.remote_region(idb, 2).is_none(),
        "{name}: withdrawn region still known"
    );
    assert!(
        matches!(
            a.ep.write(idb, 2, 0, &[1]),
            Err(Error::UnknownRegion { .. })
        ),
        "{name}: write to a withdrawn region must fail with UnknownRegion"
    );

    // Simultaneous connect: both sides call connect; one link, usable both ways.
    let mut c = Node::open(h);
    let mut d = Node::open(h);
    c.ep.register_region(1, 8)
        .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    d.ep.register_region(1, 8)
        .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    let (idc, idd) = (c.id(), d.id());
    c.ep.connect(idd, &d.ep.address())
        .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
    d.ep.connect(idc, &c.ep.address())
        .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
    drive_until(
        h,
        &mut [&mut c, &mut d],
        "a simultaneous connect to settle",
        |n| {
            n[0].ep.peers() == vec![idd]
                && n[1].ep.peers() == vec![idc]
                && n[0].ep.remote_region(idd, 1).is_some()
                && n[1].ep.remote_region(idc, 1).is_some()
        },
    );
    let rc =
        c.ep.register_region(3, 8)
            .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    drive_until(h, &mut [&mut d], "region 3 announced", |n| {
        n[0].ep.remote_region(idc, 3).is_some()
    });
    retry(&*d.ep, "write after simultaneous connect", || {
        d.ep.write(idc, 3, 0, &7u64.to_le_bytes())
    });
    drive_until(
        h,
        &mut [&mut c],
        "a write over the deduplicated link",
        |_| rc.load_u64(0) == 7,
    );
    // The link's state (peers, regions) can be seen before its event is queued: wait for
    // each side's PeerConnected (a side that never reports one fails here), then count.
    drive_until(
        h,
        &mut [&mut c, &mut d],
        "each side's PeerConnected after a simultaneous connect",
        |n| {
            n.iter().all(|x| {
                x.events
                    .iter()
                    .any(|e| matches!(e, Event::PeerConnected { .. }))
            })
        },
    );
    for node in [&c, &d] {
        let ups = node
            .events
            .iter()
            .filter(|e| matches!(e, Event::PeerConnected { .. }))
            .count();
        assert_eq!(
            ups, 1,
            "{name}: a simultaneous connect must surface as one PeerConnected"
        );
        assert!(
            !node
                .events
                .iter()
                .any(|e| matches!(e, Event::PeerFailed { .. })),
            "{name}: deduplicating a simultaneous connect must not report a failure"
        );
    }
    for node in [a, b, c, d] {
        node.ep.close();
    }
}

/// One rejected operation of [`check_bounds`]: what, its result, the error it must give.
type BoundsCase = (&'static str, Result<(), Error>, fn(&Error) -> bool);

/// Oversize, out-of-bounds, misaligned, unknown and unconnected operations are errors of
/// the right kind, never panics; the link keeps working afterwards.
pub fn check_bounds(h: &mut dyn Harness) {
    let name = h.name();
    let mut a = Node::open(h);
    let mut b = Node::open(h);
    let region =
        b.ep.register_region(1, 64)
            .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    let idb = b.id();
    let stranger = fresh_node();
    assert!(
        matches!(
            a.ep.write(idb, 1, 0, &[0; 8]),
            Err(Error::NotConnected { .. })
        ),
        "{name}: write before connect must be NotConnected"
    );
    link(h, &mut a, &mut b, &[1]);
    let len = region.len();
    let cases: Vec<BoundsCase> = vec![
        (
            "write past the end",
            a.ep.write(idb, 1, len - 4, &[0; 8]),
            |e| matches!(e, Error::OutOfBounds { .. }),
        ),
        (
            "offset overflow",
            a.ep.write(idb, 1, usize::MAX, &[0; 8]),
            |e| matches!(e, Error::OutOfBounds { .. }),
        ),
        ("unknown region", a.ep.write(idb, 99, 0, &[0; 8]), |e| {
            matches!(e, Error::UnknownRegion { .. })
        }),
        (
            "misaligned guard",
            a.ep.write_then_release(idb, 1, 0, &[1], 12, 1),
            |e| matches!(e, Error::Misaligned { .. }),
        ),
        (
            "guard out of bounds",
            a.ep.write_then_release(idb, 1, 0, &[1], len, 1),
            |e| matches!(e, Error::OutOfBounds { .. }),
        ),
        (
            "oversize write",
            a.ep.write(idb, 1, 0, &vec![0; WRITE_BYTES_MAX + 1]),
            |e| matches!(e, Error::TooLarge { .. }),
        ),
        (
            "oversize send",
            a.ep.send(idb, 1, &vec![0; SEND_BYTES_MAX + 1]),
            |e| matches!(e, Error::TooLarge { .. }),
        ),
        (
            "unconnected peer",
            a.ep.write(stranger, 1, 0, &[0; 8]),
            |e| matches!(e, Error::NotConnected { .. }),
        ),
    ];
    for (what, result, expected) in cases {
        match result {
            Err(e) if expected(&e) => {}
            other => panic!("{name}: {what}: expected the matching error, got {other:?}"),
        }
    }
    assert!(
        matches!(
            b.ep.register_region(1, 8),
            Err(Error::RegionExists { region: 1 })
        ),
        "{name}: duplicate region id must be RegionExists"
    );
    assert!(
        matches!(
            b.ep.register_region(2, REGION_BYTES_MAX + 1),
            Err(Error::TooLarge { .. })
        ),
        "{name}: oversize region must be TooLarge"
    );
    // Nothing above broke the link.
    retry(&*a.ep, "write after rejected operations", || {
        a.ep.write(idb, 1, 0, &9u64.to_le_bytes())
    });
    drive_until(
        h,
        &mut [&mut b],
        "a write after rejected operations",
        |_| region.load_u64(0) == 9,
    );
    // The largest write and send the contract allows go through.
    let big =
        b.ep.register_region(3, WRITE_BYTES_MAX)
            .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    drive_until(h, &mut [&mut a], "the large region", |n| {
        n[0].ep.remote_region(idb, 3).is_some()
    });
    let mut bytes = vec![0x5a; WRITE_BYTES_MAX];
    bytes[..8].copy_from_slice(&0u64.to_le_bytes());
    retry(&*a.ep, "largest write", || {
        a.ep.write_then_release(idb, 3, 0, &bytes, 0, 1)
    });
    drive_until(h, &mut [&mut b], "the largest write", |_| {
        big.load_u64(0) == 1
    });
    assert_eq!(
        big.to_vec(WRITE_BYTES_MAX - 8, 8).unwrap(),
        vec![0x5a; 8],
        "{name}: largest write intact"
    );
    let message = vec![0xc3; SEND_BYTES_MAX];
    retry(&*a.ep, "largest send", || a.ep.send(idb, 77, &message));
    drive_until(h, &mut [&mut b], "the largest send", |n| {
        n[0].events
            .iter()
            .any(|e| matches!(e, Event::Recv { imm: 77, data, .. } if *data == message))
    });
    a.ep.close();
    b.ep.close();
}

/// A graceful close surfaces once as `PeerFailed { Closed }`; a crash (where the harness
/// can crash a node) as a failure of another kind; writes to a failed peer are errors.
pub fn check_failures(h: &mut dyn Harness) {
    let name = h.name();
    let mut a = Node::open(h);
    let mut b = Node::open(h);
    b.ep.register_region(1, 8)
        .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    link(h, &mut a, &mut b, &[1]);
    let idb = b.id();
    b.ep.close();
    drive_until(h, &mut [&mut a], "PeerFailed after close", |n| {
        n[0].failed(idb).is_some()
    });
    assert_eq!(
        a.failed(idb),
        Some(&FailureReason::Closed),
        "{name}: graceful close reason"
    );
    assert!(
        matches!(
            a.ep.write(idb, 1, 0, &[0; 8]),
            Err(Error::PeerFailed { .. } | Error::NotConnected { .. })
        ),
        "{name}: write to a closed peer must fail"
    );
    assert!(
        b.ep.write(a.id(), 1, 0, &[0; 8]).is_err(),
        "{name}: a closed endpoint must refuse writes"
    );
    // Only once.
    for _ in 0..10 {
        h.progress();
    }
    a.pump();
    let reports = a
        .events
        .iter()
        .filter(|e| matches!(e, Event::PeerFailed { peer, .. } if *peer == idb))
        .count();
    assert_eq!(reports, 1, "{name}: a failed link is reported once");

    let mut c = Node::open(h);
    c.ep.register_region(1, 8)
        .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    link(h, &mut a, &mut c, &[1]);
    let idc = c.id();
    if h.crash(idc) {
        drive_until(h, &mut [&mut a], "PeerFailed after a crash", |n| {
            n[0].failed(idc).is_some()
        });
        assert_ne!(
            a.failed(idc),
            Some(&FailureReason::Closed),
            "{name}: a crash is not a close"
        );
    } else {
        eprintln!("{name}: crash check skipped: this harness cannot crash a node in-process (tested across processes)");
    }
    a.ep.close();
    c.ep.close();
}

/// The doorbell: `wait` returns true after a peer's write lands.
pub fn check_doorbell(h: &mut dyn Harness) {
    let name = h.name();
    let mut a = Node::open(h);
    let mut b = Node::open(h);
    let region =
        b.ep.register_region(1, 8)
            .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    link(h, &mut a, &mut b, &[1]);
    b.pump();
    // Drain rings from set-up.
    while b.ep.wait(Duration::from_millis(1)) {}
    retry(&*a.ep, "doorbell write", || {
        a.ep.write(b.id(), 1, 0, &5u64.to_le_bytes())
    });
    let start = Instant::now();
    let mut rang = false;
    while !rang && start.elapsed() < GIVE_UP {
        h.progress();
        rang = b.ep.wait(Duration::from_millis(50));
    }
    assert!(rang, "{name}: the doorbell never rang after a peer's write");
    drive_until(h, &mut [&mut b], "the doorbell write", |_| {
        region.load_u64(0) == 5
    });
    a.ep.close();
    b.ep.close();
}

/// Corked writes and sends (contract item 8): whatever a backend held goes out at the
/// outermost uncork, in issue order — a send issued last sees every write before it.
pub fn check_cork(h: &mut dyn Harness) {
    const WORDS: u64 = 64;
    const ROUNDS: u64 = 20;
    let name = h.name();
    let mut a = Node::open(h);
    let mut b = Node::open(h);
    let region =
        b.ep.register_region(1, WORDS as usize * 8)
            .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    link(h, &mut a, &mut b, &[1]);
    b.events.clear();
    let target = b.id();
    for round in 0..ROUNDS {
        let value = |i: u64| round * WORDS + i + 1;
        // Nested corks: the inner uncork must not be required to send anything.
        a.ep.cork();
        a.ep.cork();
        for i in 0..WORDS {
            retry(&*a.ep, "corked write", || {
                a.ep.write(target, 1, i as usize * 8, &value(i).to_le_bytes())
            });
        }
        a.ep.uncork();
        let imm = round as u32 + 1;
        retry(&*a.ep, "corked send", || a.ep.send(target, imm, b"end"));
        a.ep.uncork();
        drive_until(h, &mut [&mut b], "the corked round's send", |n| {
            n[0].events
                .iter()
                .any(|e| matches!(e, Event::Recv { imm: got, .. } if *got == imm))
        });
        for i in 0..WORDS {
            assert_eq!(
                region.load_u64(i as usize * 8),
                value(i),
                "{name}: round {round}: word {i} of a corked round not written before \
                 the send issued after it"
            );
        }
    }
    // A thread that stays corked (busy elsewhere) does not hold its writes for ever: the
    // peer sees them without the uncork (a probe tick sends them), so the link is not
    // silent to the peer's failure detector meanwhile.
    a.ep.cork();
    let last = ROUNDS * WORDS + 7;
    retry(&*a.ep, "write under a cork never lifted", || {
        a.ep.write(target, 1, 0, &last.to_le_bytes())
    });
    drive_until(
        h,
        &mut [&mut b],
        "a write held by a cork not yet lifted",
        |_| region.load_u64(0) == last,
    );
    a.ep.uncork();
    a.ep.close();
    b.ep.close();
}

/// Runs every check of the suite.
pub fn run_all(h: &mut dyn Harness) {
    check_links_and_regions(h);
    check_bounds(h);
    check_fifo(h);
    check_untorn_words(h);
    check_guard(h);
    check_send_recv(h);
    check_write_from(h);
    check_doorbell(h);
    check_cork(h);
    check_peer_writes(h);
    check_failures(h);
}

/// The remote half of the cross-process suite, run by the `spindle-fabric-peer` binary:
/// connects to `target` at `address`, waits for its workload region, and issues every
/// workload of [`workloads`] in turn, waiting for the target's go-ahead (a send with
/// immediate = workload index + 1) before each. Returns when the target sends immediate 0.
pub fn run_peer_role(ep: &dyn Endpoint, target: NodeId, address: &str) -> crate::Result<()> {
    ep.connect(target, address)?;
    let mut workloads = workloads();
    let start = Instant::now();
    loop {
        let Some(event) = ep.poll_event() else {
            if start.elapsed() > GIVE_UP * 4 {
                return Err(Error::Config("cross-process target never finished".into()));
            }
            ep.wait(Duration::from_millis(1));
            continue;
        };
        match event {
            Event::Recv { imm: 0, .. } => return Ok(()),
            Event::Recv { imm, .. } => {
                let Some(workload) = workloads.get_mut(imm as usize - 1) else {
                    return Err(Error::Config(format!("no workload {imm}")));
                };
                while ep.remote_region(target, WORKLOAD_REGION).is_none() {
                    ep.wait(Duration::from_millis(1));
                }
                loop {
                    match workload.issue(ep, target) {
                        Issued::Done => break,
                        Issued::More => {}
                        Issued::Busy => {
                            ep.wait(Duration::from_millis(1));
                        }
                    }
                }
            }
            Event::PeerFailed { peer, reason } if peer == target => {
                return Err(Error::PeerFailed { peer, reason });
            }
            _ => {}
        }
    }
}

/// The local half of the cross-process suite: `spawn_peer(address_of_this_endpoint,
/// this_node)` must start the peer process (see [`run_peer_role`]) and return it; every
/// workload then runs with the issue half in that process, and finally the peer is killed
/// with SIGKILL and its failure must be reported.
pub fn run_cross_process(
    h: &mut dyn Harness,
    mut spawn_peer: impl FnMut(&str, NodeId) -> std::process::Child,
) {
    let name = format!("{} across processes", h.name());
    for (index, mut check) in workloads().into_iter().enumerate() {
        let mut b = Node::open(h);
        let region =
            b.ep.register_region(WORKLOAD_REGION, check.region_len())
                .unwrap_or_else(|e| panic!("{name}: register: {e}"));
        let mut child = spawn_peer(&b.ep.address(), b.id());
        let peer = {
            let start = Instant::now();
            loop {
                b.pump();
                if let Some(peer) = b.events.iter().find_map(|e| match e {
                    Event::PeerConnected { peer } => Some(*peer),
                    _ => None,
                }) {
                    break peer;
                }
                assert!(
                    start.elapsed() < GIVE_UP,
                    "{name}: the peer process never connected"
                );
                b.ep.wait(Duration::from_millis(1));
            }
        };
        b.events.clear();
        retry(&*b.ep, "go-ahead send", || {
            b.ep.send(peer, index as u32 + 1, &[])
        });
        let start = Instant::now();
        loop {
            b.pump();
            match check.check(&region, &mut b.events) {
                Ok(true) => break,
                Ok(false) => {}
                Err(why) => {
                    let _ = child.kill();
                    panic!("{name}: {}: {why}", check.name());
                }
            }
            if start.elapsed() > GIVE_UP {
                let _ = child.kill();
                panic!(
                    "{name}: {}: gave up waiting for the final state",
                    check.name()
                );
            }
            std::hint::spin_loop();
        }
        // The last workload ends with a real crash of the peer process.
        if index + 1 == workloads().len() {
            child
                .kill()
                .unwrap_or_else(|e| panic!("{name}: SIGKILL: {e}"));
            let _ = child.wait();
            drive_until(h, &mut [&mut b], "PeerFailed after SIGKILL", |n| {
                n[0].failed(peer).is_some()
            });
            assert_ne!(
                b.failed(peer),
                Some(&FailureReason::Closed),
                "{name}: a SIGKILL is not a close"
            );
        } else {
            retry(&*b.ep, "done send", || b.ep.send(peer, 0, &[]));
            let status = child.wait().unwrap_or_else(|e| panic!("{name}: wait: {e}"));
            assert!(
                status.success(),
                "{name}: the peer process failed: {status}"
            );
        }
        b.ep.close();
    }
}
