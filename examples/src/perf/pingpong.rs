//! `dds_perf --pingpong` (`spindle perf --pingpong`): the round trip between two processes, as Cyclone's `ddsperf
//! ping`/`pong` measures it. The ping process writes a sample on topic `ping`; the pong
//! process takes it and writes it back on topic `pong`; the ping process takes that and
//! writes the next one — one sample in flight. Each round trip is timed at the ping
//! process with its monotonic clock, from just before `write` to just after `take`.
//!
//! With `--rate HZ` the ping process sends a ping every 1/HZ s (as `ddsperf ping HZHz`)
//! from a thread of its own instead of one upon each pong; the round trip is timed the
//! same way.
//!
//! Both sides react either in a WaitSet loop on a thread of their own (the default) or in
//! `on_data_available` on the delivery thread (`--listener`, ddsperf's default mode).
//! With `--bulk-size N` the ping process also writes N-byte samples on topic `bulk` as
//! fast as its window lets it, and the pong process takes them on a thread of its own:
//! the round trip under load of another subgroup between the same processes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::latency::{percentiles, Histogram};
use spindle_dds_core::{
    subgroup_of, DataReader, DataReaderListener, DataWriter, SampleBuffer, StateMask, WaitSet,
};
use spindle_qos::DataWriterQos;
use spindle_topics::Sequence;

use super::{
    line, participant, reader_qos, take_all, take_all_into, topic_qos, wait_line, Args, BoxError,
};

/// The topic ping writes and pong reads.
const PING_TOPIC: &str = "ping";
/// The topic pong writes and ping reads.
const PONG_TOPIC: &str = "pong";
/// The topic of the bulk stream (`--bulk-size`).
const BULK_TOPIC: &str = "bulk";
/// Most round trips one run records (8 bytes each: 80 MB).
pub(crate) const ROUNDTRIPS_MAX: u64 = 10_000_000;
/// How long the processes may take to match their readers.
const MATCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest single wait of a WaitSet loop before it looks at its deadline again.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// The highest `--rate` (pings a second): a period of 1 µs.
const RATE_HZ_MAX: u32 = 1_000_000;
/// How long the pong process outlives the ping process's deadline at most.
const PONG_GRACE: Duration = Duration::from_secs(30);

/// The ping, pong and bulk topics must ride different subgroups (their own total
/// orders), or the benchmark measures something else.
fn check_topics(topic_subgroups: u32) -> Result<(), BoxError> {
    let sg = [PING_TOPIC, PONG_TOPIC, BULK_TOPIC].map(|t| subgroup_of(t, topic_subgroups));
    if sg[0] == sg[1] || sg[0] == sg[2] || sg[1] == sg[2] {
        return Err(format!("topics ping/pong/bulk share subgroups {sg:?}").into());
    }
    Ok(())
}

pub(super) fn check_args(a: &Args) -> Result<(), BoxError> {
    if a.roundtrips == 0 || a.roundtrips > ROUNDTRIPS_MAX {
        return Err(format!("--roundtrips {}: 1..={ROUNDTRIPS_MAX}", a.roundtrips).into());
    }
    if a.warmup > ROUNDTRIPS_MAX {
        return Err(format!("--warmup {}: at most {ROUNDTRIPS_MAX}", a.warmup).into());
    }
    if a.rate > RATE_HZ_MAX {
        return Err(format!("--rate {}: at most {RATE_HZ_MAX} pings a second", a.rate).into());
    }
    check_topics(a.topic_subgroups)
}

/// When the ping side sends its pings (`--rate`): back to back, or one period apart.
struct Pace {
    period: Option<Duration>,
    next: Instant,
}

impl Pace {
    fn new(rate_hz: u32) -> Pace {
        Pace {
            period: (rate_hz > 0).then(|| Duration::from_secs(1) / rate_hz),
            next: Instant::now(),
        }
    }

    fn paced(&self) -> bool {
        self.period.is_some()
    }

    /// Sleeps until the next ping is due, never past `deadline`. A ping that is late (its
    /// round trip took longer than a period) goes at once, and the pace restarts from it
    /// rather than catching up with a burst.
    fn wait(&mut self, deadline: Instant) {
        let Some(period) = self.period else {
            return;
        };
        let now = Instant::now();
        if self.next > now {
            std::thread::sleep((self.next - now).min(deadline.saturating_duration_since(now)));
        }
        self.next = self.next.max(now) + period;
    }
}

fn sample(size: usize) -> Sequence {
    Sequence {
        payload: vec![0x5A; size],
    }
}

/// Set when standard input closes: the parent is done with this process.
fn stop_on_stdin_eof() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    std::thread::spawn(move || {
        let mut l = String::new();
        while std::io::stdin().read_line(&mut l).is_ok_and(|n| n > 0) {
            l.clear();
        }
        s.store(true, Ordering::Release);
    });
    stop
}

/// What the ping side recorded.
struct Record {
    rtt_ns: Vec<u64>,
    histogram: Histogram,
    /// Round trips done so far, warm-up included.
    done: u64,
}

impl Record {
    fn new(a: &Args) -> Record {
        Record {
            rtt_ns: Vec::with_capacity(a.roundtrips as usize),
            histogram: Histogram::new(),
            done: 0,
        }
    }

    fn add(&mut self, warmup: u64, ns: u64) {
        if self.done >= warmup {
            self.rtt_ns.push(ns);
            self.histogram.record(ns);
        }
        self.done += 1;
    }
}

/// The ping process (node 1).
pub(crate) fn ping(a: &Args, listen: &str) -> Result<(), BoxError> {
    check_args(a)?;
    let p = participant(a, 1, listen, None)?;
    line(&format!("ADDR {}", p.address()))?;
    let q = topic_qos(a)?;
    let ping_t = p.create_topic::<Sequence>(PING_TOPIC, q.clone())?;
    let pong_t = p.create_topic::<Sequence>(PONG_TOPIC, q.clone())?;
    let publ = p.create_publisher(Default::default())?;
    let w = publ.create_datawriter(&ping_t, DataWriterQos::from_topic_qos(&q))?;
    let r = p
        .create_subscriber(Default::default())?
        .create_datareader(&pong_t, reader_qos(&q))?;
    let bulk = if a.bulk_size > 0 {
        let t = p.create_topic::<Sequence>(BULK_TOPIC, q.clone())?;
        Some(publ.create_datawriter(&t, DataWriterQos::from_topic_qos(&q))?)
    } else {
        None
    };
    w.wait_for_readers(1, MATCH_TIMEOUT)?;
    if let Some(b) = &bulk {
        b.wait_for_readers(1, MATCH_TIMEOUT)?;
    }
    line("READY")?;
    wait_line("GO")?;
    let stop_bulk = Arc::new(AtomicBool::new(false));
    let bulk_thread = bulk.map(|b| {
        let stop = Arc::clone(&stop_bulk);
        let s = sample(a.bulk_size);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                if b.write(&s).is_err() {
                    break;
                }
                n += 1;
            }
            n
        })
    });
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let started = Instant::now();
    let rec = if a.listener {
        ping_in_listener(a, &w, &r, deadline)?
    } else {
        ping_in_waitset(a, &w, &r, deadline)?
    };
    let secs = started.elapsed().as_secs_f64();
    stop_bulk.store(true, Ordering::Release);
    let bulk_written = bulk_thread.map(|t| t.join().unwrap_or(0)).unwrap_or(0);
    if let Some(path) = &a.histogram {
        std::fs::write(path, rec.histogram.to_csv())?;
    }
    line(&format!(
        "RESULT {}",
        result_json(a, &rec, secs, bulk_written)
    ))?;
    // Stay until the parent is done with the pong side.
    let mut l = String::new();
    let _ = std::io::stdin().read_line(&mut l);
    p.close();
    Ok(())
}

/// The JSON fields the ping side knows (the parent adds the pong side's).
fn result_json(a: &Args, rec: &Record, secs: f64, bulk_written: u64) -> String {
    let mut rtt = rec.rtt_ns.clone();
    let us = |ns: u64| format!("{:.3}", ns as f64 / 1e3);
    let pct = match percentiles(&mut rtt) {
        Some(p) => format!(
            "\"rtt_p50_us\":{},\"rtt_p90_us\":{},\"rtt_p99_us\":{},\"rtt_p999_us\":{},\"rtt_p9999_us\":{},\"rtt_max_us\":{},\"rtt_min_us\":{},\"rtt_mean_us\":{},\"oneway_est_p50_us\":{:.3},\"oneway_est_p99_us\":{:.3}",
            us(p.p50_ns),
            us(p.p90_ns),
            us(p.p99_ns),
            us(p.p999_ns),
            us(p.p9999_ns),
            us(p.max_ns),
            us(p.min_ns),
            us(p.mean_ns),
            p.p50_ns as f64 / 2e3,
            p.p99_ns as f64 / 2e3
        ),
        None => "\"rtt_p50_us\":null,\"rtt_p90_us\":null,\"rtt_p99_us\":null,\"rtt_p999_us\":null,\"rtt_p9999_us\":null,\"rtt_max_us\":null,\"rtt_min_us\":null,\"rtt_mean_us\":null,\"oneway_est_p50_us\":null,\"oneway_est_p99_us\":null".to_string(),
    };
    let measured = rec.rtt_ns.len() as u64;
    format!(
        "{{\"mode\":\"pingpong\",\"transport\":\"{}\",\"level\":\"{}\",\"size\":{},\"trigger\":\"{}\",\"rate_hz\":{},\"loan\":{},\"window\":{},\"bulk_size\":{},\"spin_before_park_us\":{},\"predicate_fifo_priority\":{},\"warmup\":{},\"roundtrips\":{},\"complete\":{},\"seconds\":{:.3},{},\"bulk_written\":{},\"bulk_written_per_s\":{:.0}",
        a.transport,
        a.level,
        a.size,
        if a.listener { "listener" } else { "waitset" },
        a.rate,
        a.loan,
        a.window,
        a.bulk_size,
        a.spin_before_park_us
            .map_or_else(|| "null".to_string(), |u| u.to_string()),
        a.predicate_fifo_priority.unwrap_or(0),
        a.warmup,
        measured,
        measured == a.roundtrips,
        secs,
        pct,
        bulk_written,
        if secs > 0.0 { bulk_written as f64 / secs } else { 0.0 }
    )
}

fn ping_in_waitset(
    a: &Args,
    w: &DataWriter<Sequence>,
    r: &DataReader<Sequence>,
    deadline: Instant,
) -> Result<Record, BoxError> {
    let mut ws = WaitSet::new();
    ws.attach_condition(r.create_readcondition(StateMask::ANY));
    let s = sample(a.size);
    let total = a.warmup + a.roundtrips;
    let mut rec = Record::new(a);
    let mut pace = Pace::new(a.rate);
    'rounds: while rec.done < total {
        pace.wait(deadline);
        let t0 = Instant::now();
        w.write(&s)?;
        while take_all(r, a.loan)? == 0 {
            let now = Instant::now();
            if now >= deadline {
                break 'rounds;
            }
            let _ = ws.wait(WAIT_SLICE.min(deadline - now));
        }
        rec.add(a.warmup, t0.elapsed().as_nanos() as u64);
        if Instant::now() >= deadline {
            break;
        }
    }
    Ok(rec)
}

/// The ping side in `on_data_available` of the pong reader: it records the round trip
/// and writes the next ping from there, as `ddsperf ping` does in listener mode; when
/// paced (`--rate`), the ping thread writes the next one at its time instead.
struct PingListener {
    paced: bool,
    writer: DataWriter<Sequence>,
    sample: Sequence,
    loan: bool,
    warmup: u64,
    total: u64,
    deadline: Instant,
    state: Mutex<(Instant, Record)>,
    /// Notified with `state` when a paced round trip is recorded.
    answered: Condvar,
    finished: Arc<(Mutex<Option<String>>, Condvar)>,
}

impl PingListener {
    fn finish(&self, why: String) {
        let (m, c) = &*self.finished;
        let mut f = m.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(why);
        c.notify_all();
    }
}

impl DataReaderListener<Sequence> for PingListener {
    fn on_data_available(&self, r: &DataReader<Sequence>) {
        let n = match take_all(r, self.loan) {
            Ok(n) => n,
            Err(e) => return self.finish(format!("take: {e}")),
        };
        if n == 0 {
            return;
        }
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let ns = now.duration_since(st.0).as_nanos() as u64;
        st.1.add(self.warmup, ns);
        if st.1.done >= self.total || now >= self.deadline {
            drop(st);
            return self.finish(String::new());
        }
        if self.paced {
            drop(st);
            self.answered.notify_all();
            return;
        }
        st.0 = Instant::now();
        drop(st);
        if let Err(e) = self.writer.write(&self.sample) {
            self.finish(format!("write: {e}"));
        }
    }
}

fn ping_in_listener(
    a: &Args,
    w: &DataWriter<Sequence>,
    r: &DataReader<Sequence>,
    deadline: Instant,
) -> Result<Record, BoxError> {
    let finished = Arc::new((Mutex::new(None::<String>), Condvar::new()));
    let mut pace = Pace::new(a.rate);
    let l = PingListener {
        paced: pace.paced(),
        writer: w.clone(),
        sample: sample(a.size),
        loan: a.loan,
        warmup: a.warmup,
        total: a.warmup + a.roundtrips,
        deadline,
        state: Mutex::new((Instant::now(), Record::new(a))),
        answered: Condvar::new(),
        finished: Arc::clone(&finished),
    };
    let listener = Arc::new(l);
    r.set_listener(ListenerRef(Arc::clone(&listener)));
    {
        let mut st = listener.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 = Instant::now();
    }
    w.write(&listener.sample)?;
    if pace.paced() {
        pace_pings(&listener, &mut pace, deadline)?;
    }
    let (m, c) = &*finished;
    let mut f = m.lock().unwrap_or_else(|p| p.into_inner());
    while f.is_none() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        f = c
            .wait_timeout(f, WAIT_SLICE.min(deadline - now))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    let why = f.take().unwrap_or_default();
    drop(f);
    r.set_listener(NoListener);
    if !why.is_empty() {
        return Err(why.into());
    }
    let mut st = listener.state.lock().unwrap_or_else(|p| p.into_inner());
    Ok(std::mem::replace(&mut st.1, Record::new(a)))
}

/// The paced ping thread of the listener mode: once the last ping's pong is recorded, it
/// writes the next at its time, until the listener finishes or `deadline`.
fn pace_pings(l: &PingListener, pace: &mut Pace, deadline: Instant) -> Result<(), BoxError> {
    let finished = || {
        l.finished
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    };
    let mut sent = 1;
    while !finished() && Instant::now() < deadline {
        {
            let mut st = l.state.lock().unwrap_or_else(|p| p.into_inner());
            while st.1.done < sent && Instant::now() < deadline {
                st = l
                    .answered
                    .wait_timeout(st, WAIT_SLICE)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if st.1.done < sent || st.1.done >= l.total {
                return Ok(());
            }
        }
        pace.wait(deadline);
        l.state.lock().unwrap_or_else(|p| p.into_inner()).0 = Instant::now();
        l.writer.write(&l.sample)?;
        sent += 1;
    }
    Ok(())
}

/// A listener shared with the thread that reads its results.
struct ListenerRef<L>(Arc<L>);

impl<L: DataReaderListener<Sequence>> DataReaderListener<Sequence> for ListenerRef<L> {
    fn on_data_available(&self, r: &DataReader<Sequence>) {
        self.0.on_data_available(r);
    }
}

/// Replaces a listener once the run is over.
struct NoListener;

impl DataReaderListener<Sequence> for NoListener {}

/// Takes the pings `r` holds and writes each back on `w`; returns how many.
fn echo(
    r: &DataReader<Sequence>,
    w: &DataWriter<Sequence>,
    loan: bool,
    ready: &Sequence,
) -> Result<u64, BoxError> {
    if loan {
        // The bytes lent, not decoded: echo a sample of the same size held ready.
        let n = r.take_loaned(usize::MAX, StateMask::ANY)?.len() as u64;
        for _ in 0..n {
            w.write(ready)?;
        }
        Ok(n)
    } else {
        let got = r.take(usize::MAX, StateMask::ANY)?;
        for s in &got {
            if let Some(d) = &s.data {
                w.write(d)?;
            }
        }
        Ok(got.len() as u64)
    }
}

struct PongListener {
    writer: DataWriter<Sequence>,
    loan: bool,
    ready: Sequence,
    echoed: AtomicU64,
}

impl DataReaderListener<Sequence> for PongListener {
    fn on_data_available(&self, r: &DataReader<Sequence>) {
        match echo(r, &self.writer, self.loan, &self.ready) {
            Ok(n) => {
                self.echoed.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => eprintln!("dds_perf pong: {e}"),
        }
    }
}

/// Counts the bulk samples the pong process takes.
struct BulkCount {
    count: Arc<AtomicU64>,
    loan: bool,
    /// The values each take decodes into, kept from one callback to the next as the
    /// throughput runs keep theirs: a 64 KiB value allocated and freed per sample costs
    /// the delivery thread page faults when the allocator gives the memory back.
    buf: Mutex<SampleBuffer<Sequence>>,
}

impl DataReaderListener<Sequence> for BulkCount {
    fn on_data_available(&self, r: &DataReader<Sequence>) {
        let mut buf = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        let n = take_all_into(r, self.loan, &mut buf).unwrap_or(0);
        self.count.fetch_add(n, Ordering::Relaxed);
    }
}

/// The pong process (node 2): echoes until its standard input closes or the deadline.
pub(crate) fn pong(a: &Args, listen: &str, contact: &str) -> Result<(), BoxError> {
    check_args(a)?;
    let p = participant(a, 2, listen, Some(contact))?;
    let q = topic_qos(a)?;
    let ping_t = p.create_topic::<Sequence>(PING_TOPIC, q.clone())?;
    let pong_t = p.create_topic::<Sequence>(PONG_TOPIC, q.clone())?;
    let sub = p.create_subscriber(Default::default())?;
    let r = sub.create_datareader(&ping_t, reader_qos(&q))?;
    let w = p
        .create_publisher(Default::default())?
        .create_datawriter(&pong_t, DataWriterQos::from_topic_qos(&q))?;
    let bulk = if a.bulk_size > 0 {
        let t = p.create_topic::<Sequence>(BULK_TOPIC, q.clone())?;
        Some(sub.create_datareader(&t, reader_qos(&q))?)
    } else {
        None
    };
    w.wait_for_readers(1, MATCH_TIMEOUT)?;
    let stop = stop_on_stdin_eof();
    let deadline = Instant::now() + Duration::from_secs(a.seconds) + PONG_GRACE;
    let bulk_count = Arc::new(AtomicU64::new(0));
    // In listener mode the reader must outlive the run (dropping it deletes it).
    let mut bulk_in_listener = None;
    let bulk_thread = match bulk {
        Some(b) if a.listener => {
            b.set_listener(BulkCount {
                count: Arc::clone(&bulk_count),
                loan: a.loan,
                buf: Mutex::new(SampleBuffer::new()),
            });
            bulk_in_listener = Some(b);
            None
        }
        Some(b) => {
            let count = Arc::clone(&bulk_count);
            let stop = Arc::clone(&stop);
            let loan = a.loan;
            Some(std::thread::spawn(move || {
                let mut ws = WaitSet::new();
                ws.attach_condition(b.create_readcondition(StateMask::ANY));
                let mut buf = SampleBuffer::new();
                while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
                    match take_all_into(&b, loan, &mut buf) {
                        Ok(0) => {
                            let _ = ws.wait(WAIT_SLICE);
                        }
                        Ok(n) => {
                            count.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(_) => break,
                    }
                }
            }))
        }
        None => None,
    };
    let started = Instant::now();
    let ready = sample(a.size);
    if a.listener {
        // Before READY: a ping that arrived before the listener would never fire it.
        r.set_listener(PongListener {
            writer: w.clone(),
            loan: a.loan,
            ready,
            echoed: AtomicU64::new(0),
        });
        line("READY")?;
        while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(WAIT_SLICE);
        }
        r.set_listener(NoListener);
    } else {
        line("READY")?;
        let mut ws = WaitSet::new();
        ws.attach_condition(r.create_readcondition(StateMask::ANY));
        while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
            if echo(&r, &w, a.loan, &ready)? == 0 {
                let _ = ws.wait(WAIT_SLICE);
            }
        }
    }
    if let Some(t) = bulk_thread {
        let _ = t.join();
    }
    if let Some(b) = bulk_in_listener {
        b.set_listener(NoListener);
    }
    line(&format!(
        "BULK {} {:.6}",
        bulk_count.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    ))?;
    p.close();
    Ok(())
}

/// Runs both processes and returns the result as one JSON object (`exe_args` go first
/// on the children's command lines, see [`super::run`]).
pub(crate) fn bench(a: &Args, exe_args: &[String]) -> Result<String, BoxError> {
    check_args(a)?;
    let exe = std::env::current_exe()?;
    let common = |c: &mut Command| {
        // The participants' settings too (the failure detector's floor, the topics'
        // subgroups): the children are the participants.
        super::child_args(a, exe_args, c);
        c.arg("--pingpong")
            .args(["--roundtrips", &a.roundtrips.to_string()])
            .args(["--warmup", &a.warmup.to_string()])
            .args(["--seconds", &a.seconds.to_string()])
            .args(["--rate", &a.rate.to_string()])
            .args(["--bulk-size", &a.bulk_size.to_string()]);
        if let Some(h) = &a.histogram {
            c.arg("--histogram").arg(h);
        }
    };
    let (ping_listen, pong_listen) = super::listen_pair(a, "pingpong");
    let mut pc = Command::new(&exe);
    common(&mut pc);
    let mut pinger = pc
        .args(["pub", &ping_listen])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut pout = BufReader::new(pinger.stdout.take().ok_or("stdout")?).lines();
    let addr = pout
        .next()
        .ok_or("the ping process ended")??
        .strip_prefix("ADDR ")
        .ok_or("expected ADDR")?
        .to_string();
    let mut sc = Command::new(&exe);
    common(&mut sc);
    let mut ponger = sc
        .args(["sub", &pong_listen, &addr])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut sout = BufReader::new(ponger.stdout.take().ok_or("stdout")?).lines();
    if sout.next().ok_or("the pong process ended")?? != "READY" {
        return Err("the pong process is not ready".into());
    }
    if pout.next().ok_or("the ping process ended")?? != "READY" {
        return Err("the ping process is not ready".into());
    }
    let mut pin = pinger.stdin.take().ok_or("stdin")?;
    writeln!(pin, "GO")?;
    pin.flush()?;
    let result = pout
        .next()
        .ok_or("the ping process ended without a result")??;
    drop(ponger.stdin.take());
    let bulk = sout
        .next()
        .ok_or("the pong process ended without its count")??;
    drop(pin);
    let _ = ponger.wait();
    let _ = pinger.wait();
    let json = result
        .strip_prefix("RESULT ")
        .ok_or_else(|| format!("unexpected result {result:?}"))?;
    let b: Vec<&str> = bulk.split_whitespace().collect();
    if b.len() != 3 || b[0] != "BULK" {
        return Err(format!("unexpected pong count {bulk:?}").into());
    }
    let bulk_taken: f64 = b[1].parse()?;
    let bulk_secs: f64 = b[2].parse()?;
    let rate = if bulk_secs > 0.0 {
        bulk_taken / bulk_secs
    } else {
        0.0
    };
    Ok(format!(
        "{json},\"bulk_taken\":{bulk_taken},\"bulk_taken_per_s\":{rate:.0}}}"
    ))
}
