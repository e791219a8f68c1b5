//! `spindle pub` and `spindle sub`: samples of a type known only from its IDL, as JSON.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::interrupt;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use spindle_dds_core::{DataReader, DomainParticipant, Sample, StateMask, WaitSet};
use spindle_dynamic::DynType;
use spindle_topics::{CdrSample, Endianness};

use crate::domain::{join, load_config, load_type, topic, ReliabilityArg, TopicArgs};
use crate::Fail;

/// Most samples `take` returns at once.
const TAKE_BATCH_MAX: usize = 256;
/// How long one wait for data lasts before the view and the deadline are looked at again.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// The longest `--timeout-s` (about 30 years): beyond it, a deadline would not fit the
/// clock.
pub const TIMEOUT_S_MAX: u64 = 1 << 30;

/// The lowest `--rate` above 0: one sample a day (a lower one is no pace, a typo).
pub const RATE_MIN: f64 = 1.0 / 86_400.0;

/// Byte order on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EndianArg {
    /// CDR_LE.
    Little,
    /// CDR_BE.
    Big,
}

/// What `pub` does with each sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ActionArg {
    /// Write it (DDS `write`).
    Write,
    /// Dispose its instance (DDS `dispose`): readers see the instance end.
    Dispose,
    /// Unregister its instance (DDS `unregister_instance`; disposed first, unless this
    /// run's last sample of it was a dispose).
    Unregister,
}

impl ActionArg {
    /// How the closing line says that it was done `n` times on `topic`.
    fn done(self, n: u64, topic: &str) -> String {
        match self {
            ActionArg::Write => format!("wrote {n} samples to {topic}"),
            ActionArg::Dispose => format!("disposed {n} instances of {topic}"),
            ActionArg::Unregister => format!("unregistered {n} instances of {topic}"),
        }
    }
}

/// `spindle pub`.
#[derive(Debug, Args)]
pub struct PubArgs {
    #[command(flatten)]
    pub topic: TopicArgs,
    /// Samples as JSON text (one per argument). With none, --file and --random: stdin.
    pub samples: Vec<String>,
    /// A file of samples: JSON lines, or one JSON array of samples; `-` is stdin. Input
    /// is read to its end and every sample checked before the domain is joined.
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// Write N random samples of the type instead (seeded by --seed).
    #[arg(long, value_name = "N")]
    pub random: Option<u64>,
    /// Seed of --random.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Samples per second (0: as fast as the writer accepts them).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Write this many samples in all, cycling through the given ones (default: each once).
    #[arg(long)]
    pub count: Option<u64>,
    /// Wait for this many other participants to read the topic before writing.
    #[arg(long, default_value_t = 1)]
    pub wait_readers: u32,
    /// How long to wait for readers, and for the samples' delivery, seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=TIMEOUT_S_MAX))]
    pub timeout_s: u64,
    /// Read JSON lines on stdin while running and write each as it comes (`tail -f … |
    /// spindle pub --stream …`); a line that is not a valid sample is reported with its
    /// line number and skipped, and the exit code is then 2.
    #[arg(long, conflicts_with_all = ["samples", "file", "random", "count"])]
    pub stream: bool,
    /// Byte order of the samples.
    #[arg(long, value_enum, default_value = "little")]
    pub endianness: EndianArg,
    /// What each sample does. With dispose or unregister a sample may give only its key
    /// members (`{"aircraft_id": 7}`); the others take their zero values.
    #[arg(long, value_enum, default_value = "write")]
    pub action: ActionArg,
    /// Exit right after writing instead of waiting until this participant has seen its
    /// own samples delivered (delivery in the topic's order means every member has them;
    /// never waited for with --reliability best-effort).
    #[arg(long)]
    pub no_wait_delivered: bool,
}

/// `spindle sub`.
#[derive(Debug, Args)]
pub struct SubArgs {
    #[command(flatten)]
    pub topic: TopicArgs,
    /// Exit after this many samples (default: run until killed).
    #[arg(long)]
    pub count: Option<u64>,
    /// Give up after this many seconds: exit 1 if --count samples have not come by then,
    /// 0 without --count.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=TIMEOUT_S_MAX))]
    pub timeout_s: Option<u64>,
    /// Print only the samples' data, one JSON value per line (no SampleInfo, no views).
    #[arg(long)]
    pub data_only: bool,
    /// Read through a content filter: only samples that pass this DDS filter expression
    /// (`position.altitude_m > %0 AND phase = 'CRUISE'`; members as in the IDL, enums by
    /// name or number). Checked against the type before the domain is joined.
    #[arg(long, value_name = "EXPRESSION")]
    pub filter: Option<String>,
    /// The filter's parameters, %0 first (repeat the option).
    #[arg(long = "filter-param", value_name = "VALUE", requires = "filter")]
    pub filter_params: Vec<String>,
}

/// Reads the samples of `pub`: every one is checked against the type (and encoded)
/// before the domain is joined, so bad input fails fast with exit 2.
fn gather(a: &PubArgs, t: &DynType) -> Result<Vec<Value>, Fail> {
    let mut texts: Vec<(String, String)> = a
        .samples
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("argument {}", i + 1), s.clone()))
        .collect();
    let mut values = Vec::new();
    if let Some(n) = a.random {
        for i in 0..n {
            let v = t
                .random_json(a.seed.wrapping_add(i))
                .map_err(|e| Fail::input(format!("--random: {e}")))?;
            values.push(v);
        }
    }
    let read_stream = |name: &str, r: &mut dyn BufRead| -> Result<Vec<(String, String)>, Fail> {
        let mut all = String::new();
        r.read_to_string(&mut all)
            .map_err(|e| Fail::input(format!("{name}: {e}")))?;
        if all.trim_start().starts_with('[') {
            // One JSON array of samples.
            let v: Vec<Value> = serde_json::from_str(&all)
                .map_err(|e| Fail::input(format!("{name}: malformed JSON: {e}")))?;
            return Ok(v
                .into_iter()
                .enumerate()
                .map(|(i, s)| (format!("{name}: sample {}", i + 1), s.to_string()))
                .collect());
        }
        Ok(all
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (format!("{name}:{}", i + 1), l.to_string()))
            .collect())
    };
    match &a.file {
        Some(f) if f.as_os_str() == "-" => {
            texts.extend(read_stream("stdin", &mut std::io::stdin().lock())?);
        }
        Some(f) => {
            let file =
                std::fs::File::open(f).map_err(|e| Fail::input(format!("{}: {e}", f.display())))?;
            texts.extend(read_stream(
                &f.display().to_string(),
                &mut std::io::BufReader::new(file),
            )?);
        }
        None if a.samples.is_empty() && a.random.is_none() => {
            texts.extend(read_stream("stdin", &mut std::io::stdin().lock())?);
        }
        None => {}
    }
    for (origin, text) in texts {
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| Fail::input(format!("{origin}: malformed JSON: {e}")))?;
        values.push(v);
    }
    if values.is_empty() {
        return Err(Fail::input("no samples to write"));
    }
    Ok(values)
}

/// Runs `spindle pub`.
pub fn run_pub(a: PubArgs) -> Result<u8, Fail> {
    if !(a.rate == 0.0 || (a.rate >= RATE_MIN && a.rate.is_finite())) {
        return Err(Fail::input(format!(
            "--rate {:?}: samples per second, 0 (as fast as the writer accepts them) or at \
             least {RATE_MIN:.6} (one a day)",
            a.rate
        )));
    }
    a.topic.qos.check()?;
    let t = Arc::new(load_type(&a.topic)?);
    let values = if a.stream {
        Vec::new()
    } else {
        gather(&a, &t)?
    };
    let e = endianness(a.endianness);
    let zero = template(&t, a.action)?;
    let mut samples = Vec::with_capacity(values.len());
    for (i, v) in values.into_iter().enumerate() {
        let s = t
            .encode_json(&completed(zero.as_ref(), v), e)
            .map_err(|err| Fail::input(format!("sample {}: {err}", i + 1)))?;
        samples
            .push(CdrSample::new(s.bytes, s.key_hash).map_err(|err| Fail::input(err.to_string()))?);
    }
    let cfg = load_config(&a.topic.config)?;
    a.topic.qos.check_config(&cfg, &a.topic.config)?;
    let p = join(&cfg)?;
    let r = publish(&p, &a, &t, &samples);
    leave(p);
    r
}

/// What a sample of `action` is laid over ([`completed`]): nothing for a write; the
/// type's zero value for a dispose or an unregister, built once per run.
fn template(t: &DynType, action: ActionArg) -> Result<Option<Value>, Fail> {
    if action == ActionArg::Write {
        return Ok(None);
    }
    t.zero_json()
        .map(Some)
        .map_err(|e| Fail::input(format!("{}: {e}", t.type_name())))
}

/// `value` as the sample takes it: laid over `zero` ([`template`]) when there is one, so
/// that the key members alone do for a dispose or an unregister.
fn completed(zero: Option<&Value>, value: Value) -> Value {
    match zero {
        Some(z) => laid_over(z.clone(), value),
        None => value,
    }
}

/// `over` laid over `base`: objects member by member, anything else replaced (a member
/// `base` lacks stays, for the encoder to name).
fn laid_over(base: Value, over: Value) -> Value {
    match (base, over) {
        (Value::Object(mut b), Value::Object(o)) => {
            for (k, v) in o {
                let merged = match b.remove(&k) {
                    Some(old) => laid_over(old, v),
                    None => v,
                };
                b.insert(k, merged);
            }
            Value::Object(b)
        }
        (_, over) => over,
    }
}

/// Does `action` with sample `s`.
fn act(
    w: &spindle_dds_core::DataWriter<CdrSample>,
    action: ActionArg,
    s: &CdrSample,
) -> spindle_dds_core::Result<()> {
    match action {
        ActionArg::Write => w.write(s),
        ActionArg::Dispose => w.dispose(s),
        ActionArg::Unregister => w.unregister_instance(s),
    }
}

fn endianness(e: EndianArg) -> Endianness {
    match e {
        EndianArg::Little => Endianness::Little,
        EndianArg::Big => Endianness::Big,
    }
}

/// Leaves the domain: a view change without this participant (the others keep their
/// majority), not the crash a bare exit would look like. Its entities are gone already.
fn leave(p: DomainParticipant) {
    // Whatever a failed command left behind goes first: a participant with entities
    // cannot leave, and vanishing would cost a domain of two its majority.
    let left = p
        .delete_contained_entities()
        .and_then(|()| p.clone().delete());
    if let Err(e) = left {
        eprintln!("spindle: leaving the domain: {e}; stopping instead");
        p.close();
    }
}

fn publish(
    p: &DomainParticipant,
    a: &PubArgs,
    t: &Arc<DynType>,
    samples: &[CdrSample],
) -> Result<u8, Fail> {
    let topic = topic(p, &a.topic, t)?;
    let tq = a.topic.qos.topic();
    let publisher = p.create_publisher(a.topic.qos.publisher())?;
    let w = publisher.create_datawriter(&topic, a.topic.qos.writer(&tq))?;
    let r = write_all(a, t, samples, &w);
    publisher.delete_datawriter(w)?;
    r
}

fn write_all(
    a: &PubArgs,
    t: &DynType,
    samples: &[CdrSample],
    w: &spindle_dds_core::DataWriter<CdrSample>,
) -> Result<u8, Fail> {
    let timeout = Duration::from_secs(a.timeout_s);
    wait_readers(w, a.wait_readers, timeout)
        .map_err(|e| Fail::failed(format!("waiting for {} readers: {e}", a.wait_readers)))?;
    if interrupt::interrupted() {
        return Err(interrupt::stopped("before writing"));
    }
    let start = Instant::now();
    // Sleeps until sample `i + 1` is due; `Err` once interrupted (after `i + 1` writes).
    let pace = |i: u64| {
        let due = if a.rate > 0.0 {
            let next = start + Duration::from_secs_f64((i + 1) as f64 / a.rate);
            next.saturating_duration_since(Instant::now())
        } else {
            Duration::ZERO
        };
        if interrupt::sleep(due) {
            return Err(interrupt::stopped(format!("{} samples written", i + 1)));
        }
        Ok(())
    };
    let mut refused = 0u64;
    let total = if a.stream {
        // Lines come from a thread of their own, so that an interrupt ends the wait for
        // the next one.
        let zero = template(t, a.action)?;
        let (tx, lines) =
            std::sync::mpsc::sync_channel::<std::io::Result<String>>(STREAM_LINES_MAX);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut written = 0u64;
        let mut n = 0usize;
        loop {
            let line = match lines.recv_timeout(WAIT_SLICE) {
                Ok(line) => line.map_err(|e| Fail::input(format!("stdin: {e}")))?,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if interrupt::interrupted() {
                        return Err(interrupt::stopped(format!("{written} samples written")));
                    }
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            n += 1;
            if line.trim().is_empty() {
                continue;
            }
            let sample = serde_json::from_str::<Value>(&line)
                .map_err(|e| format!("malformed JSON: {e}"))
                .and_then(|v| {
                    t.encode_json(&completed(zero.as_ref(), v), endianness(a.endianness))
                        .map_err(|e| e.to_string())
                })
                .and_then(|s| CdrSample::new(s.bytes, s.key_hash).map_err(|e| e.to_string()));
            match sample {
                Ok(s) => {
                    act(w, a.action, &s)?;
                    pace(written)?;
                    written += 1;
                }
                Err(e) => {
                    eprintln!("spindle pub: stdin:{n}: {e} (skipped)");
                    refused += 1;
                }
            }
        }
        written
    } else {
        let total = a.count.unwrap_or(samples.len() as u64);
        for i in 0..total {
            act(w, a.action, &samples[(i % samples.len() as u64) as usize])?;
            pace(i)?;
        }
        total
    };
    eprintln!("spindle pub: {}", a.action.done(total, &a.topic.topic));
    // Delivered in the topic's order here means every member has them; best-effort
    // samples may be lost, so there is nothing to wait for then.
    let reliable = a.topic.qos.reliability == ReliabilityArg::Reliable;
    if reliable && !a.no_wait_delivered && total > 0 {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match w.wait_for_acknowledgments(left.min(READERS_SLICE)) {
                Ok(()) => break,
                Err(spindle_dds_core::Error::Timeout(_)) if interrupt::interrupted() => {
                    return Err(interrupt::stopped(format!(
                        "{total} samples written, not all seen delivered"
                    )));
                }
                Err(spindle_dds_core::Error::Timeout(e)) if left.is_zero() => {
                    return Err(Fail::failed(format!(
                        "{total} samples written, not all delivered within {}s: {e}",
                        a.timeout_s
                    )));
                }
                Err(spindle_dds_core::Error::Timeout(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        eprintln!("spindle pub: {total} samples delivered");
    }
    if refused > 0 {
        return Err(Fail::input(format!(
            "{refused} lines of stdin were not samples of {}",
            t.type_name()
        )));
    }
    Ok(0)
}

/// Lines of `--stream` input read ahead of the writer.
const STREAM_LINES_MAX: usize = 1024;

/// [`DataWriter::wait_for_readers`](spindle_dds_core::DataWriter::wait_for_readers) in
/// slices, so that an interrupt ends the wait (`Ok`, the caller looks).
fn wait_readers(
    w: &spindle_dds_core::DataWriter<CdrSample>,
    readers: u32,
    timeout: Duration,
) -> spindle_dds_core::Result<()> {
    let until = Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match w.wait_for_readers(readers, left.min(READERS_SLICE)) {
            Err(spindle_dds_core::Error::Timeout(_))
                if !left.is_zero() && !interrupt::interrupted() => {}
            Err(_) if interrupt::interrupted() => return Ok(()),
            other => return other,
        }
    }
}

/// How long one look for readers lasts before an interrupt is checked.
const READERS_SLICE: Duration = Duration::from_millis(100);

/// Runs `spindle sub`.
pub fn run_sub(a: SubArgs) -> Result<u8, Fail> {
    a.topic.qos.check()?;
    let t = Arc::new(load_type(&a.topic)?);
    if let Some(expr) = &a.filter {
        // A bad expression or member is bad input, said before joining.
        spindle_dds_core::content_filter::ContentFilter::of_dyn_type(
            (*t).clone(),
            expr,
            &a.filter_params,
        )
        .map_err(|e| Fail::input(format!("--filter: {e}")))?;
    }
    let cfg = load_config(&a.topic.config)?;
    a.topic.qos.check_config(&cfg, &a.topic.config)?;
    let p = join(&cfg)?;
    let r = subscribe(&p, &a, &t);
    leave(p);
    r
}

/// A state's name in snake case (`NotAliveDisposed` → `not_alive_disposed`).
fn state<T: std::fmt::Debug>(s: T) -> String {
    let mut out = String::new();
    for (i, c) in format!("{s:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// One sample as a JSON line: `{"data": …, "info": {…}}`; a dispose or unregister
/// notice (no data) names its instance's key (`"key"`, from the reader's
/// `get_key_value`) when the reader knows it. A notice the reader made itself (its
/// writer left or lost its liveliness) is in no total order: `"order_index": null`.
fn sample_line(
    t: &DynType,
    r: &DataReader<CdrSample>,
    s: &Sample<CdrSample>,
) -> Result<Value, String> {
    let data = match &s.data {
        Some(d) if s.info.valid_data => t.decode_json(d.bytes()).map_err(|e| e.to_string())?,
        _ => Value::Null,
    };
    let i = &s.info;
    let key = if i.valid_data || !t.has_key() {
        None
    } else {
        r.get_key_value(i.instance_handle)
            .ok()
            .and_then(|k| t.decode_json(k.bytes()).ok())
            .map(|v| t.key_json(&v))
    };
    let mut line = json!({
        "data": data,
        "info": {
            "view_id": i.view_id,
            "order_index": i.in_total_order().then_some(i.order_index),
            "writer": i.publication_handle.to_string(),
            "writer_seq": i.writer_seq,
            "instance": i.instance_handle.0.to_string(),
            "instance_state": state(i.instance_state),
            "sample_state": state(i.sample_state),
            "view_state": state(i.view_state),
            "valid_data": i.valid_data,
            "source_timestamp_ns": i.source_timestamp_ns,
        }
    });
    if let Some(k) = key {
        line["key"] = k;
    }
    Ok(line)
}

fn view_line(p: &DomainParticipant) -> Option<(u32, Value)> {
    let v = p.view()?;
    Some((
        v.vid,
        json!({"view": {"id": v.vid, "members": v.members, "leader": v.members.first()}}),
    ))
}

fn subscribe(p: &DomainParticipant, a: &SubArgs, t: &Arc<DynType>) -> Result<u8, Fail> {
    let topic = topic(p, &a.topic, t)?;
    let tq = a.topic.qos.topic();
    let sub = p.create_subscriber(a.topic.qos.subscriber())?;
    let r: DataReader<CdrSample> = match &a.filter {
        Some(expr) => {
            let name = format!("{}-filtered", a.topic.topic);
            let cft = p.create_contentfilteredtopic(&name, &topic, expr, &a.filter_params)?;
            sub.create_datareader(&cft, a.topic.qos.reader(&tq))?
        }
        None => sub.create_datareader(&topic, a.topic.qos.reader(&tq))?,
    };
    let result = read_all(p, a, t, &r);
    sub.delete_datareader(r)?;
    result
}

fn read_all(
    p: &DomainParticipant,
    a: &SubArgs,
    t: &Arc<DynType>,
    r: &DataReader<CdrSample>,
) -> Result<u8, Fail> {
    eprintln!("spindle sub: reading {} ({})", a.topic.topic, t.type_name());
    let mut ws = WaitSet::new();
    ws.attach_condition(r.create_readcondition(StateMask::ANY));
    let deadline = a.timeout_s.map(|s| Instant::now() + Duration::from_secs(s));
    let out = std::io::stdout();
    let mut last_view = None;
    let mut got = 0u64;
    loop {
        let mut o = out.lock();
        if !a.data_only {
            if let Some((vid, line)) = view_line(p) {
                if last_view != Some(vid) {
                    last_view = Some(vid);
                    writeln!(o, "{line}").map_err(|e| Fail::failed(e.to_string()))?;
                }
            }
        }
        // No more than --count asks for: the rest stays in the reader.
        let max = a.count.map_or(TAKE_BATCH_MAX, |c| {
            usize::try_from(c.saturating_sub(got)).map_or(TAKE_BATCH_MAX, |n| n.min(TAKE_BATCH_MAX))
        });
        for s in r.take(max, StateMask::ANY)? {
            match sample_line(t, r, &s) {
                Ok(line) if a.data_only => {
                    if s.info.valid_data {
                        writeln!(o, "{}", line["data"])
                    } else {
                        Ok(())
                    }
                }
                Ok(line) => writeln!(o, "{line}"),
                // A sample that does not decode as the type: said, not fatal.
                Err(e) => {
                    eprintln!(
                        "spindle sub: a sample from {} does not decode as {}: {e}",
                        s.info.publication_handle,
                        t.type_name()
                    );
                    Ok(())
                }
            }
            .map_err(|e| Fail::failed(e.to_string()))?;
            got += u64::from(s.info.valid_data);
        }
        o.flush().map_err(|e| Fail::failed(e.to_string()))?;
        drop(o);
        if a.count.is_some_and(|c| got >= c) {
            return Ok(0);
        }
        if let Some(d) = deadline {
            if Instant::now() >= d {
                return match a.count {
                    Some(c) => Err(Fail::failed(format!(
                        "{got} of {c} samples within {}s",
                        a.timeout_s.unwrap_or(0)
                    ))),
                    None => Ok(0),
                };
            }
        }
        if let Some(why) = p.stopped() {
            return Err(Fail::failed(format!("the participant stopped: {why}")));
        }
        if interrupt::interrupted() {
            return Err(interrupt::stopped(format!("{got} samples read")));
        }
        // A timeout only means no data yet.
        let _ = ws.wait(WAIT_SLICE);
    }
}
