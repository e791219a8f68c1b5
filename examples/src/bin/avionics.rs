//! The avionics demo domain (README main job): processes on this machine publish the
//! avionics topics through Spindle DDS; one air-data computer is killed mid-run; the two
//! displays' logs show one identical order across all writers, and the view change.
//!
//! `avionics [--out DIR] [--transport tcp|shm] [--seconds S]` runs the whole domain;
//! `avionics member ...` is one process of it (started by the former).
//!
//! `avionics recorder [--out DIR] [--transport tcp|shm] [--seconds S]` runs the
//! flight-data recorder (module `recorder`): a PERSISTENT (logged) topic written by three
//! processes, the whole domain SIGKILLed and restarted from its data directories, every
//! durable event read back.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use spindle_dds_core::{
    DataReader, DomainParticipant, DomainParticipantFactory, Sample, StateMask, WaitSet,
};
use spindle_examples::procs::{member_config, Addresses, Proc};
use spindle_examples::run_dir::RunDir;
use spindle_examples::{check_agreement, parse_log};
use spindle_qos::{DataReaderQos, DataWriterQos, DurabilityKind, History, Reliability, TopicQos};
use spindle_topics::avionics::{
    AirData, Attitude, FlightPlan, GeoPoint, NavigationPosition, TerrainTile,
};
use spindle_topics::TopicType;

use spindle_examples::procs::BoxError;

#[derive(Parser)]
#[command(
    about = "A small avionics domain on Spindle DDS: sensors, a terrain database, a flight-management node, two displays; one sensor is killed mid-run"
)]
struct Args {
    /// Write each reader's log to `DIR/<process>-<topic>.log`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// tcp or shm.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "shm"])]
    transport: String,
    /// How long the sensors publish.
    #[arg(long, default_value_t = 6)]
    seconds: u64,
    /// The members' failure-detector floor (`[fabric] suspect_floor_ms`; the default if
    /// not given). A SIGKILL is noticed at once by its broken links whatever the floor.
    #[arg(long)]
    suspect_floor_ms: Option<u64>,
    #[command(subcommand)]
    member: Option<Sub>,
}

#[path = "avionics/recorder.rs"]
mod recorder;

#[derive(Subcommand)]
enum Sub {
    /// The flight-data recorder: a logged topic; the whole domain is killed and restarted,
    /// and every durable event is read back.
    Recorder {
        /// Data directories go to `DIR/fdr-<node>`.
        #[arg(long)]
        out: Option<PathBuf>,
        /// tcp or shm.
        #[arg(long, default_value = "tcp", value_parser = ["tcp", "shm"])]
        transport: String,
        /// How long the recorders record before the kill.
        #[arg(long, default_value_t = 2)]
        seconds: u64,
    },
    /// One recorder process (started by `recorder`).
    RecorderMember {
        node: u32,
        transport: String,
        members: String,
        data_dir: PathBuf,
        phase: String,
    },
    /// One process of the domain (started by the domain itself).
    Member {
        name: String,
        node: u32,
        transport: String,
        listen: String,
        contact: String,
        out: PathBuf,
        /// `[fabric] suspect_floor_ms` (the default if not given).
        #[arg(long)]
        suspect_floor_ms: Option<u64>,
    },
}

/// `(process, node, starts late)`.
const PROCESSES: &[(&str, u32, bool)] = &[
    ("fms", 1, false),
    ("adc1", 2, false),
    ("adc2", 3, false),
    ("ahrs", 4, false),
    ("gnss", 5, false),
    ("pfd", 6, false),
    ("mfd", 7, true),
    ("tawd", 8, false),
];
const KILLED: &str = "adc2";

fn main() {
    let args = Args::parse();
    let r = match args.member {
        Some(Sub::Member {
            name,
            node,
            transport,
            listen,
            contact,
            out,
            suspect_floor_ms,
        }) => member(
            &name,
            node,
            &transport,
            &listen,
            &contact,
            &out,
            suspect_floor_ms,
        ),
        Some(Sub::Recorder {
            out,
            transport,
            seconds,
        }) => recorder::domain(out, &transport, seconds),
        Some(Sub::RecorderMember {
            node,
            transport,
            members,
            data_dir,
            phase,
        }) => recorder::member(node, &transport, &members, &data_dir, &phase),
        None => domain(
            args.out,
            &args.transport,
            args.seconds,
            args.suspect_floor_ms,
        ),
    };
    if let Err(e) = r {
        eprintln!("avionics: {e}");
        std::process::exit(1);
    }
}

fn topic_qos(stored: bool) -> TopicQos {
    let q = TopicQos::default().with_reliability(Reliability::reliable());
    if stored {
        q.with_durability(DurabilityKind::TransientLocal)
            .with_history(History::keep_last(8))
    } else {
        q
    }
}

// ----- one process ----------------------------------------------------------------------

fn member(
    name: &str,
    node: u32,
    transport: &str,
    listen: &str,
    contact: &str,
    out: &Path,
    suspect_floor_ms: Option<u64>,
) -> Result<(), BoxError> {
    let mut cfg = member_config(node, transport, listen, contact)?;
    if let Some(floor) = suspect_floor_ms {
        cfg.fabric.suspect_floor_ms = floor;
        cfg.fabric.suspect_ceiling_ms = cfg.fabric.suspect_ceiling_ms.max(floor);
    }
    let p = DomainParticipantFactory::instance().create_participant(0, Default::default(), &cfg)?;
    let stop = Arc::new(AtomicBool::new(false));
    let exit = Arc::new(AtomicBool::new(false));
    {
        let (stop, exit) = (Arc::clone(&stop), Arc::clone(&exit));
        std::thread::spawn(move || {
            let mut l = String::new();
            let mut stdin = BufReader::new(std::io::stdin());
            while stdin.read_line(&mut l).is_ok_and(|n| n > 0) {
                match l.trim() {
                    "STOP" => stop.store(true, Ordering::Release),
                    "EXIT" => break,
                    _ => {}
                }
                l.clear();
            }
            stop.store(true, Ordering::Release);
            exit.store(true, Ordering::Release);
        });
    }
    match name {
        "adc1" | "adc2" => {
            let id = if name == "adc1" { 0xA1 } else { 0xA2 };
            publish::<AirData>(&p, "AirData", false, 10, &stop, move |i| AirData {
                aircraft_id: id,
                timestamp_ns: now_ns(),
                indicated_airspeed_mps: 120.0 + (i % 10) as f32,
                true_airspeed_mps: 130.0,
                mach: 0.4,
                pressure_altitude_m: 3000.0,
                vertical_speed_mps: 0.0,
                static_air_temperature_k: 268.0,
                altitude_reference: Default::default(),
            })
        }
        "tawd" => {
            // The terrain database: 2 MiB tiles around the aircraft, a new revision of one
            // of them every TERRAIN_PERIOD_MS (large samples: RDMC, in the topic's order).
            publish::<TerrainTile>(&p, "TerrainTile", false, TERRAIN_PERIOD_MS, &stop, |i| {
                let tile_id = TERRAIN_TILE_BASE + (i % TERRAIN_TILES) as u32;
                let revision = (i / TERRAIN_TILES) as u16;
                TerrainTile {
                    tile_id,
                    revision,
                    level: 9,
                    south_west: GeoPoint {
                        latitude_deg: 48.25 + 0.25 * (i % TERRAIN_TILES) as f64,
                        longitude_deg: 11.5,
                        altitude_m: 0.0,
                    },
                    extent_deg: 0.25,
                    rows: TERRAIN_ROWS,
                    columns: TERRAIN_COLUMNS,
                    elevation_posts: terrain_posts(tile_id, revision),
                }
            })
        }
        "ahrs" => publish::<Attitude>(&p, "Attitude", false, 10, &stop, |i| Attitude {
            aircraft_id: 0xA1,
            timestamp_ns: now_ns(),
            roll_rad: (i as f64 * 0.01).sin() * 0.1,
            pitch_rad: 0.02,
            heading_rad: 1.5,
            body_rates_radps: [0.0; 3],
        }),
        "gnss" => publish::<NavigationPosition>(&p, "NavigationPosition", false, 50, &stop, |i| {
            NavigationPosition {
                aircraft_id: 0xA1,
                timestamp_ns: now_ns(),
                position: GeoPoint {
                    latitude_deg: 48.35 + i as f64 * 1e-5,
                    longitude_deg: 11.78,
                    altitude_m: 3000.0,
                },
                velocity_ned_mps: [120.0, 0.0, 0.0],
                horizontal_accuracy_m: 2.5,
                gnss_valid: true,
                phase: Default::default(),
            }
        }),
        "fms" => {
            // Reads the sensors, publishes the flight plan (a stored topic: displays that
            // start late still get its latest revisions).
            let s = p.create_subscriber(Default::default())?;
            let air = reader::<AirData>(&p, &s, "AirData", false)?;
            let nav = reader::<NavigationPosition>(&p, &s, "NavigationPosition", false)?;
            let mut logs = Logs::new(out, name);
            let pubr = p.create_publisher(Default::default())?;
            let t = p.create_topic::<FlightPlan>("FlightPlan", topic_qos(true))?;
            let w = pubr.create_datawriter(&t, writer_qos(t.qos()))?;
            println!("READY");
            std::io::stdout().flush()?;
            let mut revision = 0u16;
            let mut next = Instant::now();
            while !exit.load(Ordering::Acquire) {
                if !stop.load(Ordering::Acquire) && Instant::now() >= next {
                    revision += 1;
                    w.write(&FlightPlan {
                        aircraft_id: 0xA1,
                        callsign: "SPN42".into(),
                        origin: "EDDM".into(),
                        destination: "LSZH".into(),
                        revision,
                        route: Vec::new(),
                    })?;
                    next = Instant::now() + Duration::from_millis(200);
                }
                logs.drain(&air, "AirData")?;
                logs.drain(&nav, "NavigationPosition")?;
                std::thread::sleep(Duration::from_millis(2));
            }
            logs.drain(&air, "AirData")?;
            logs.drain(&nav, "NavigationPosition")?;
            Ok(())
        }
        "pfd" | "mfd" => {
            let s = p.create_subscriber(Default::default())?;
            let air = reader::<AirData>(&p, &s, "AirData", false)?;
            let att = reader::<Attitude>(&p, &s, "Attitude", false)?;
            let nav = reader::<NavigationPosition>(&p, &s, "NavigationPosition", false)?;
            let plan = reader::<FlightPlan>(&p, &s, "FlightPlan", true)?;
            let terrain = reader::<TerrainTile>(&p, &s, "TerrainTile", false)?;
            let mut ws = WaitSet::new();
            ws.attach_condition(air.create_readcondition(StateMask::ANY));
            ws.attach_condition(att.create_readcondition(StateMask::ANY));
            ws.attach_condition(nav.create_readcondition(StateMask::ANY));
            ws.attach_condition(plan.create_readcondition(StateMask::ANY));
            ws.attach_condition(terrain.create_readcondition(StateMask::ANY));
            println!("READY");
            std::io::stdout().flush()?;
            let mut logs = Logs::new(out, name);
            while !exit.load(Ordering::Acquire) {
                let _ = ws.wait(Duration::from_millis(50));
                logs.drain(&air, "AirData")?;
                logs.drain(&att, "Attitude")?;
                logs.drain(&nav, "NavigationPosition")?;
                logs.drain(&plan, "FlightPlan")?;
                logs.drain(&terrain, "TerrainTile")?;
            }
            // The view this display ends in: the domain's members after the kill.
            if let Some(v) = p.view() {
                line(&format!("VIEW {} {:?}", v.vid, v.members))?;
            }
            Ok(())
        }
        other => Err(format!("unknown process {other:?}").into()),
    }
}

fn line(s: &str) -> Result<(), BoxError> {
    let mut o = std::io::stdout();
    writeln!(o, "{s}")?;
    o.flush()?;
    Ok(())
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn reader<T: TopicType>(
    p: &DomainParticipant,
    s: &spindle_dds_core::Subscriber,
    topic: &str,
    stored: bool,
) -> Result<DataReader<T>, BoxError> {
    let t = p.create_topic::<T>(topic, topic_qos(stored))?;
    let q = DataReaderQos::from_topic_qos(t.qos()).with_history(History::keep_all());
    Ok(s.create_datareader(&t, q)?)
}

fn publish<T: TopicType>(
    p: &DomainParticipant,
    topic: &str,
    stored: bool,
    period_ms: u64,
    stop: &AtomicBool,
    make: impl Fn(u64) -> T,
) -> Result<(), BoxError> {
    let t = p.create_topic::<T>(topic, topic_qos(stored))?;
    let w = p
        .create_publisher(Default::default())?
        .create_datawriter(&t, writer_qos(t.qos()))?;
    println!("READY");
    std::io::stdout().flush()?;
    let mut i = 0u64;
    let start = Instant::now();
    while !stop.load(Ordering::Acquire) {
        w.write(&make(i))?;
        i += 1;
        let next = start + Duration::from_millis(period_ms * i);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    println!("WROTE {i}");
    // Stay a member until the domain ends, so no view change cuts the others' last views.
    let mut l = String::new();
    let _ = std::io::stdin().read_line(&mut l);
    Ok(())
}

/// One log file per topic this process reads.
struct Logs {
    dir: PathBuf,
    process: String,
    files: BTreeMap<String, std::io::BufWriter<std::fs::File>>,
}

impl Logs {
    fn new(dir: &Path, process: &str) -> Logs {
        Logs {
            dir: dir.to_path_buf(),
            process: process.to_string(),
            files: BTreeMap::new(),
        }
    }

    fn drain<T: TopicType + Keyed>(
        &mut self,
        r: &DataReader<T>,
        topic: &str,
    ) -> Result<(), BoxError> {
        let samples: Vec<Sample<T>> = r.take(usize::MAX, StateMask::ANY)?;
        if samples.is_empty() {
            return Ok(());
        }
        if !self.files.contains_key(topic) {
            let path = self.dir.join(format!("{}-{topic}.log", self.process));
            self.files.insert(
                topic.to_string(),
                std::io::BufWriter::new(std::fs::File::create(path)?),
            );
        }
        let f = self.files.get_mut(topic).ok_or("log file")?;
        // The log is of the total order: a notice a reader made itself is in none.
        for s in samples.iter().filter(|s| s.info.in_total_order()) {
            if let Some(d) = s.data.as_ref() {
                d.check()
                    .map_err(|e| format!("{}: {topic}: {e}", self.process))?;
            }
            let key = s.data.as_ref().map_or_else(|| "-".to_string(), |d| d.key());
            writeln!(
                f,
                "{} {} {} {} {}",
                s.info.view_id,
                s.info.order_index,
                s.info.publication_handle,
                key,
                s.info.writer_seq
            )?;
        }
        f.flush()?;
        Ok(())
    }
}

/// The key field of the avionics topics, for the logs, and a check of a sample's
/// contents where the writer made them checkable.
trait Keyed {
    fn key(&self) -> String;
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}
impl Keyed for TerrainTile {
    fn key(&self) -> String {
        format!("{:#x}", self.tile_id)
    }
    fn check(&self) -> Result<(), String> {
        if self.elevation_posts == terrain_posts(self.tile_id, self.revision) {
            Ok(())
        } else {
            Err(format!(
                "tile {:#x} revision {}: {} bytes of posts that are not the database's",
                self.tile_id,
                self.revision,
                self.elevation_posts.len()
            ))
        }
    }
}

/// Terrain tiles the database cycles through.
const TERRAIN_TILES: u64 = 4;
/// The first tile's id.
const TERRAIN_TILE_BASE: u32 = 0x2F_0A00;
/// Elevation posts per tile row: 1,024 x 1,024 posts of 2 bytes, 2 MiB a tile.
const TERRAIN_ROWS: u16 = 1024;
/// Elevation posts per tile column.
const TERRAIN_COLUMNS: u16 = 1024;
/// How often the database publishes a tile.
const TERRAIN_PERIOD_MS: u64 = 1000;

/// The posts of revision `revision` of tile `tile_id`: 16-bit big-endian elevations in
/// decimetres, a pattern of the two so that a reader can check every byte.
fn terrain_posts(tile_id: u32, revision: u16) -> Vec<u8> {
    let posts = usize::from(TERRAIN_ROWS) * usize::from(TERRAIN_COLUMNS);
    let mut x = (u64::from(tile_id) << 16) ^ u64::from(revision);
    let mut v = Vec::with_capacity(posts * 2);
    while v.len() < posts * 2 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.extend_from_slice(&x.to_be_bytes());
    }
    v
}
impl Keyed for AirData {
    fn key(&self) -> String {
        format!("{:#x}", self.aircraft_id)
    }
}
impl Keyed for Attitude {
    fn key(&self) -> String {
        format!("{:#x}", self.aircraft_id)
    }
}
impl Keyed for NavigationPosition {
    fn key(&self) -> String {
        format!("{:#x}", self.aircraft_id)
    }
}
impl Keyed for FlightPlan {
    fn key(&self) -> String {
        format!("{:#x}", self.aircraft_id)
    }
}

// ----- the domain -----------------------------------------------------------------------

fn spawn(
    name: &'static str,
    node: u32,
    transport: &str,
    listen: &str,
    contact: &str,
    out: &Path,
    suspect_floor_ms: Option<u64>,
) -> Result<Proc, BoxError> {
    let mut args: Vec<String> = [
        "member",
        name,
        &node.to_string(),
        transport,
        listen,
        contact,
        &out.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(floor) = suspect_floor_ms {
        args.extend(["--suspect-floor-ms".to_string(), floor.to_string()]);
    }
    Proc::spawn_self(name, &args)
}

fn wait_ready(p: &Proc, timeout: Duration) -> Result<(), BoxError> {
    p.expect("READY", timeout)
        .map(|_| ())
        .map_err(|_| format!("{} did not become ready", p.name).into())
}

fn domain(
    out: Option<PathBuf>,
    transport: &str,
    seconds: u64,
    suspect_floor_ms: Option<u64>,
) -> Result<(), BoxError> {
    let dir = RunDir::new(out, "avionics")?;
    let r = run(&dir.path, transport, seconds, suspect_floor_ms);
    dir.finish(r)
}

fn run(
    out: &Path,
    transport: &str,
    seconds: u64,
    suspect_floor_ms: Option<u64>,
) -> Result<(), BoxError> {
    for e in std::fs::read_dir(out)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "log") {
            std::fs::remove_file(p)?;
        }
    }
    let addresses = Addresses::new(transport, "av")?;
    let contact = addresses.contact();
    println!("avionics: {} processes over {transport}, sensors publish for {seconds} s, {KILLED} is killed half-way; logs in {}", PROCESSES.len(), out.display());
    let mut procs: Vec<Proc> = Vec::new();
    let start = Instant::now();
    let fms = spawn(
        "fms",
        1,
        transport,
        addresses.first(),
        &contact,
        out,
        suspect_floor_ms,
    )?;
    wait_ready(&fms, Duration::from_secs(30))?;
    let launch = |name: &'static str, node: u32| -> Result<Proc, BoxError> {
        spawn(
            name,
            node,
            transport,
            &addresses.listen()?,
            &contact,
            out,
            suspect_floor_ms,
        )
    };
    procs.push(fms);
    for (name, node, _) in PROCESSES.iter().filter(|p| p.0 != "fms" && !p.2) {
        procs.push(launch(name, *node)?);
    }
    for p in &procs[1..] {
        wait_ready(p, Duration::from_secs(60))?;
    }
    println!(
        "  {:>7.3} s  all early processes ready",
        start.elapsed().as_secs_f64()
    );
    let publish_start = Instant::now();
    std::thread::sleep(Duration::from_millis(seconds * 1000 / 3));
    for (name, node, _) in PROCESSES.iter().filter(|p| p.2) {
        let p = launch(name, *node)?;
        wait_ready(&p, Duration::from_secs(60))?;
        println!(
            "  {:>7.3} s  {name} started late and is ready",
            start.elapsed().as_secs_f64()
        );
        procs.push(p);
    }
    let half = Duration::from_millis(seconds * 1000 / 2);
    std::thread::sleep(half.saturating_sub(publish_start.elapsed()));
    if let Some(k) = procs.iter_mut().find(|p| p.name == KILLED) {
        // std's Child::kill is SIGKILL on Unix: a crash, not a graceful leave.
        k.child.kill()?;
        let _ = k.child.wait();
        println!(
            "  {:>7.3} s  SIGKILL {KILLED}",
            start.elapsed().as_secs_f64()
        );
    }
    std::thread::sleep(
        Duration::from_millis(seconds * 1000).saturating_sub(publish_start.elapsed()),
    );
    for p in procs.iter_mut().filter(|p| p.name != KILLED) {
        p.say("STOP");
    }
    // Let the last samples reach every reader, then end every process.
    std::thread::sleep(Duration::from_millis(1500));
    for p in procs.iter_mut().filter(|p| p.name != KILLED) {
        p.say("EXIT");
        p.stdin = None;
    }
    for p in procs.iter_mut().filter(|p| p.name != KILLED) {
        let st = p.child.wait()?;
        if !st.success() {
            return Err(format!("{} exited with {st}", p.name).into());
        }
        for l in p.lines.iter() {
            if let Some(v) = l.strip_prefix("VIEW ") {
                println!("  {:<5} ends in view {v}", p.name);
            }
        }
    }
    let killed = PROCESSES.iter().find(|p| p.0 == KILLED).map_or(0, |p| p.1);
    println!("  ({KILLED} was node {killed}; the views after its SIGKILL no longer hold it)");
    report(out)
}

fn report(out: &Path) -> Result<(), BoxError> {
    let mut by_topic: BTreeMap<String, BTreeMap<String, Vec<spindle_examples::LogLine>>> =
        BTreeMap::new();
    for e in std::fs::read_dir(out)? {
        let path = e?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let Some((process, topic)) = stem.split_once('-') else {
            continue;
        };
        let log = parse_log(stem, &std::fs::read_to_string(&path)?)?;
        by_topic
            .entry(topic.to_string())
            .or_default()
            .insert(process.to_string(), log);
    }
    let mut failed = false;
    for (topic, logs) in &by_topic {
        println!("{topic}:");
        for (process, log) in logs {
            let views: std::collections::BTreeSet<u32> = log.iter().map(|l| l.view_id).collect();
            // Per writer, the last view it was delivered in: the killed writer's ends at
            // the view change that removed it.
            let mut last: BTreeMap<&str, u32> = BTreeMap::new();
            for l in log {
                last.insert(l.writer.as_str(), l.view_id);
            }
            println!(
                "  {process:<5} {:>6} samples, views {:?}, last view per writer {:?}",
                log.len(),
                views,
                last
            );
        }
        match check_agreement(logs) {
            Ok(a) => println!(
                "  agree: {} readers, {} samples at the same positions, identical sets in views {:?}",
                logs.len(),
                a.common_samples,
                a.views_compared
            ),
            Err(problems) => {
                failed = true;
                for p in problems.iter().take(10) {
                    println!("  DISAGREE: {p}");
                }
            }
        }
    }
    if failed {
        return Err("readers disagree".into());
    }
    println!(
        "every reader of every topic saw one identical order, across writers and the view change"
    );
    Ok(())
}

/// How long a write may wait for room in the ring. A view change (the SIGKILLed air-data
/// computer, a display joining) stops writers until the next view is installed; on a
/// loaded machine that takes longer than the default 100 ms, and a sensor should then wait
/// rather than fail.
const WRITE_BLOCKING_S: i64 = 10;

/// The writers' QoS: the topic's, with RELIABILITY `max_blocking_time` of
/// [`WRITE_BLOCKING_S`].
fn writer_qos(topic: &TopicQos) -> DataWriterQos {
    DataWriterQos::from_topic_qos(topic)
        .with_max_blocking_time(spindle_qos::Duration::from_secs(WRITE_BLOCKING_S))
}
