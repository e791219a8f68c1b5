//! Tests of the participant configuration: TOML, environment overrides, and every
//! refusal naming its key.

use super::*;

#[test]
fn atomic_ordering_comes_from_toml_or_env_and_bad_values_are_named() {
    let base = "node_id = 1\ntransport = \"tcp\"\nlisten = \"127.0.0.1:0\"\nbootstrap = [1]\n";
    let c = ParticipantConfig::from_toml_str(base, "a.toml").unwrap();
    assert_eq!(c.atomic_ordering, AtomicOrdering::RoundRobin);
    let text = format!("{base}atomic_ordering = \"dare\"\ntopic_subgroups = 8\n");
    let mut c = ParticipantConfig::from_toml_str(&text, "d.toml").unwrap();
    assert_eq!(c.atomic_ordering, AtomicOrdering::Dare);
    c.apply_env(|k| (k == "SPINDLE_ATOMIC_ORDERING").then(|| "round_robin".to_string()))
        .unwrap();
    assert_eq!(c.atomic_ordering, AtomicOrdering::RoundRobin);
    let e = c
        .apply_env(|k| (k == "SPINDLE_ATOMIC_ORDERING").then(|| "raft".to_string()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("SPINDLE_ATOMIC_ORDERING") && e.contains("raft"),
        "{e}"
    );
    let e = ParticipantConfig::from_toml_str(&format!("{base}atomic_ordering = \"x\"\n"), "x.toml")
        .unwrap_err()
        .to_string();
    // The file, the setting and the values it takes.
    assert!(
        e.contains("x.toml")
            && e.contains("atomic_ordering")
            && e.contains("round_robin")
            && e.contains("dare"),
        "{e}"
    );
    // More topic subgroups than a domain may run DARE subgroups: named, with the fix.
    let text = format!("{base}atomic_ordering = \"dare\"\ntopic_subgroups = 20\n");
    let e = ParticipantConfig::from_toml_str(&text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.toml") && e.contains("topic_subgroups = 20") && e.contains("dare"),
        "{e}"
    );
}

#[test]
fn dare_settings_come_from_toml_or_env_and_bad_values_are_named() {
    let base = "node_id = 1\ntransport = \"tcp\"\nlisten = \"127.0.0.1:0\"\nbootstrap = [1]\n";
    let c = ParticipantConfig::from_toml_str(base, "a.toml").unwrap();
    assert_eq!(c.dare, DareSettings::default());
    let text = format!(
        "{base}atomic_ordering = \"dare\"\ntopic_subgroups = 8\n[dare]\nheartbeat_us = 250\n\
         election_timeout_us = 3000\nlog_entries = 64\nsender_window = 32\n"
    );
    let mut c = ParticipantConfig::from_toml_str(&text, "d.toml").unwrap();
    let want = DareSettings {
        heartbeat_us: 250,
        election_timeout_us: 3_000,
        log_entries: 64,
        sender_window: 32,
    };
    assert_eq!(c.dare, want);
    // One key alone; the others keep their defaults.
    let one = format!("{base}[dare]\nlog_entries = 4096\n");
    let d = ParticipantConfig::from_toml_str(&one, "o.toml")
        .unwrap()
        .dare;
    assert_eq!(
        d,
        DareSettings {
            log_entries: 4096,
            ..DareSettings::default()
        }
    );
    // The environment overrides the file.
    let env = |k: &str| match k {
        "SPINDLE_DARE_HEARTBEAT_US" => Some("500".to_string()),
        "SPINDLE_DARE_ELECTION_TIMEOUT_US" => Some("20000".to_string()),
        "SPINDLE_DARE_LOG_ENTRIES" => Some("128".to_string()),
        "SPINDLE_DARE_SENDER_WINDOW" => Some("16".to_string()),
        _ => None,
    };
    c.apply_env(env).unwrap();
    assert_eq!(
        c.dare,
        DareSettings {
            heartbeat_us: 500,
            election_timeout_us: 20_000,
            log_entries: 128,
            sender_window: 16,
        }
    );
    c.validate("env").unwrap();
    let e = c
        .apply_env(|k| (k == "SPINDLE_DARE_LOG_ENTRIES").then(|| "many".to_string()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("SPINDLE_DARE_LOG_ENTRIES") && e.contains("many"),
        "{e}"
    );
    // Bad values: the file, the table, the key and what is wrong; never a panic.
    for (body, named) in [
        ("heartbeat_us = 0", "heartbeat_us = 0: must be 1.."),
        (
            "heartbeat_us = 2000\nelection_timeout_us = 3000",
            "election_timeout_us = 3000: must be at least twice heartbeat_us (2000)",
        ),
        (
            "election_timeout_us = 1000",
            "election_timeout_us = 1000: must be at least twice heartbeat_us (1000)",
        ),
        (
            "election_timeout_us = 100000000",
            "election_timeout_us = 100000000",
        ),
        ("log_entries = 0", "log_entries = 0: must be 2..=8192"),
        ("log_entries = 100000", "log_entries = 100000"),
        ("sender_window = 0", "sender_window = 0: must be 1..=4096"),
        ("sender_window = 5000", "sender_window = 5000"),
    ] {
        let text = format!("{base}[dare]\n{body}\n");
        let e = ParticipantConfig::from_toml_str(&text, "b.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("b.toml") && e.contains("[dare]") && e.contains(named),
            "{body}: {e}"
        );
    }
    let e = ParticipantConfig::from_toml_str(&format!("{base}[dare]\nheartbeat = 5\n"), "u.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("u.toml") && e.contains("heartbeat"), "{e}");
    let e =
        ParticipantConfig::from_toml_str(&format!("{base}[dare]\nheartbeat_us = -5\n"), "n.toml")
            .unwrap_err()
            .to_string();
    assert!(e.contains("n.toml") && e.contains("heartbeat_us"), "{e}");
    let mut c = ParticipantConfig::from_toml_str(base, "a.toml").unwrap();
    c.apply_env(|k| (k == "SPINDLE_DARE_HEARTBEAT_US").then(|| "0".to_string()))
        .unwrap();
    let e = c.validate("env").unwrap_err().to_string();
    assert!(e.contains("[dare] heartbeat_us = 0"), "{e}");
}

/// Values that parse but no participant can run with are refused at once, naming
/// the key: not a transport error about an address, an engine error about a view, or
/// a join that times out after 0 ms.
#[test]
fn unusable_listen_bootstrap_and_timeout_are_refused_by_key() {
    const BASE: &str = "node_id = 1\ntransport = \"tcp\"\n";
    for (rest, named) in [
        (
            "listen = \"127.0.0.1:70000\"\nbootstrap = [1]",
            "listen = \"127.0.0.1:70000\": transport = \"tcp\" listens on a host:port",
        ),
        ("listen = \"7402\"\nbootstrap = [1]", "listen = \"7402\""),
        (
            "listen = \"127.0.0.1:0\"\nbootstrap = [1, 1]",
            "bootstrap = [1, 1]: node 1 is listed twice",
        ),
        (
            "listen = \"127.0.0.1:0\"\nbootstrap = [1]\nentity_timeout_ms = 0",
            "entity_timeout_ms = 0",
        ),
    ] {
        let e = ParticipantConfig::from_toml_str(&format!("{BASE}{rest}"), "n.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("n.toml") && e.contains(named), "{rest}: {e}");
    }
    let e = ParticipantConfig::from_toml_str(
        &format!(
            "{BASE}listen = \"127.0.0.1:0\"\n[[contacts]]\nnode = 1\naddress = \"127.0.0.1:9\""
        ),
        "n.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("its only contact is itself"), "{e}");
    // An shm listen is a namespace, not an address.
    ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"shm\"\nlisten = \"demo\"\nbootstrap = [1]",
        "s.toml",
    )
    .unwrap();
}

#[test]
fn parses_and_overrides_and_names_bad_keys() {
    let text = r#"
        node_id = 2
        transport = "tcp"
        listen = "127.0.0.1:7402"
        [[contacts]]
        node = 1
        address = "127.0.0.1:7401"
    "#;
    let mut c = ParticipantConfig::from_toml_str(text, "t.toml").unwrap();
    assert_eq!(c.node_id, 2);
    assert_eq!(c.window_slots, 64);
    c.apply_env(|k| (k == "SPINDLE_NODE_ID").then(|| "5".to_string()))
        .unwrap();
    assert_eq!(c.node_id, 5);
    let e = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"udp\"\nlisten=\"127.0.0.1:0\"",
        "u.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("u.toml") && e.contains("udp"), "{e}");
    let e = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"",
        "n.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no contact"), "{e}");
    let e = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\nwindow_slots=0",
        "w.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("window_slots"), "{e}");
    let e = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\ntopic_subgroups=0",
        "s.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("s.toml") && e.contains("topic_subgroups = 0"),
        "{e}"
    );
    assert_eq!(
        c.sample_bytes_max, SAMPLE_BYTES_MAX_DEFAULT,
        "large samples are on by default, up to 256 MiB"
    );
    assert_eq!(SAMPLE_BYTES_MAX_DEFAULT, 256 << 20);
    c.apply_env(|k| (k == "SPINDLE_SAMPLE_BYTES_MAX").then(|| "16777216".to_string()))
        .unwrap();
    assert_eq!(c.sample_bytes_max, 16 << 20);
    assert!(c
        .apply_env(|k| (k == "SPINDLE_SAMPLE_BYTES_MAX").then(|| "big".to_string()))
        .is_err());
    let base = "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\n";
    let ok =
        ParticipantConfig::from_toml_str(&format!("{base}sample_bytes_max = 1048576"), "l.toml")
            .unwrap();
    assert_eq!(ok.sample_bytes_max, 1 << 20);
    let e = ParticipantConfig::from_toml_str(
        &format!("{base}sample_bytes_max = {}", SAMPLE_BYTES_MAX_LIMIT + 1),
        "l.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("l.toml") && e.contains("sample_bytes_max"),
        "{e}"
    );
    assert_eq!(
        c.large_window_messages, 1,
        "one large sample in flight by default"
    );
    let ok =
        ParticipantConfig::from_toml_str(&format!("{base}large_window_messages = 3"), "w.toml")
            .unwrap();
    assert_eq!(ok.large_window_messages, 3);
    for bad in [0, 4] {
        let e = ParticipantConfig::from_toml_str(
            &format!("{base}large_window_messages = {bad}"),
            "w.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("w.toml") && e.contains(&format!("large_window_messages = {bad}")),
            "{e}"
        );
    }
    c.apply_env(|k| (k == "SPINDLE_LARGE_WINDOW_MESSAGES").then(|| "2".to_string()))
        .unwrap();
    assert_eq!(c.large_window_messages, 2);
    assert!(c
        .apply_env(|k| (k == "SPINDLE_LARGE_WINDOW_MESSAGES").then(|| "two".to_string()))
        .is_err());
    assert_eq!(c.topic_subgroups, TOPIC_SUBGROUPS_DEFAULT);
    c.apply_env(|k| (k == "SPINDLE_TOPIC_SUBGROUPS").then(|| "1".to_string()))
        .unwrap();
    assert_eq!(c.topic_subgroups, 1);
    assert_eq!(c.spin_before_park_us, 1_000);
    c.apply_env(|k| (k == "SPINDLE_SPIN_BEFORE_PARK_US").then(|| "20".to_string()))
        .unwrap();
    assert_eq!(c.spin_before_park_us, 20);
    let e = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\nspin_before_park_us=100001",
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("spin_before_park_us"), "{e}");
    assert_eq!(c.busy_yield_us, 0, "off by default");
    c.apply_env(|k| (k == "SPINDLE_BUSY_YIELD_US").then(|| "50".to_string()))
        .unwrap();
    assert_eq!(c.busy_yield_us, 50);
    assert!(c
        .apply_env(|k| (k == "SPINDLE_BUSY_YIELD_US").then(|| "fifty".to_string()))
        .is_err());
    let ok = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\nbusy_yield_us=50",
        "p.toml",
    )
    .unwrap();
    assert_eq!(ok.busy_yield_us, 50);
    let e = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\nbusy_yield_us=100001",
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("busy_yield_us = 100001") && e.contains("p.toml"),
        "{e}"
    );
    assert!(c
        .apply_env(|k| (k == "SPINDLE_CONTACTS").then(|| "x".into()))
        .is_err());
}

const BOOT: &str = "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\n";

#[test]
fn the_predicate_threads_placement_comes_from_the_file_or_the_environment() {
    let mut c = ParticipantConfig::from_toml_str(BOOT, "p.toml").unwrap();
    assert_eq!(
        c.thread_sched().unwrap(),
        Default::default(),
        "no change by default"
    );
    let f = ParticipantConfig::from_toml_str(
        &format!("{BOOT}predicate_cpus = [1, 3]\npredicate_fifo_priority = 20"),
        "p.toml",
    )
    .unwrap();
    let s = f.thread_sched().unwrap();
    assert_eq!((s.cpus(), s.fifo_priority()), (vec![1, 3], 20));
    c.apply_env(|k| match k {
        "SPINDLE_PREDICATE_CPUS" => Some("2, 0".into()),
        "SPINDLE_PREDICATE_FIFO_PRIORITY" => Some("5".into()),
        _ => None,
    })
    .unwrap();
    let s = c.thread_sched().unwrap();
    assert_eq!((s.cpus(), s.fifo_priority()), (vec![0, 2], 5));
    for (toml, named) in [
        ("predicate_cpus = [0, 5000]", "predicate_cpus = CPU 5000"),
        (
            "predicate_fifo_priority = 100",
            "predicate_fifo_priority = 100",
        ),
    ] {
        let e = ParticipantConfig::from_toml_str(&format!("{BOOT}{toml}"), "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(named) && e.contains("p.toml"), "{e}");
    }
    for (k, v) in [
        ("SPINDLE_PREDICATE_CPUS", "one"),
        ("SPINDLE_PREDICATE_FIFO_PRIORITY", "300"),
    ] {
        let e = c
            .apply_env(|key| (key == k).then(|| v.to_string()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(k), "{e}");
    }
}

#[test]
fn rejoin_comes_from_the_file_or_the_environment_and_refuses_a_data_dir() {
    let mut c = ParticipantConfig::from_toml_str(BOOT, "r.toml").unwrap();
    assert!(!c.rejoin, "rejoin is off by default");
    let on = ParticipantConfig::from_toml_str(&format!("{BOOT}rejoin = true"), "r.toml");
    assert!(on.unwrap().rejoin);
    c.apply_env(|k| (k == "SPINDLE_REJOIN").then(|| "1".to_string()))
        .unwrap();
    assert!(c.rejoin);
    let e = c
        .apply_env(|k| (k == "SPINDLE_REJOIN").then(|| "maybe".to_string()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("SPINDLE_REJOIN") && e.contains("maybe"), "{e}");
    let e = ParticipantConfig::from_toml_str(
        &format!("{BOOT}rejoin = true\ndata_dir = \"/tmp/x\""),
        "d.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("d.toml") && e.contains("rejoin"), "{e}");
}

#[test]
fn the_data_dir_comes_from_the_file_or_the_environment() {
    let base = "node_id = 1\ntransport = \"tcp\"\nlisten=\"127.0.0.1:0\"\nbootstrap=[1]\n";
    let mut c = ParticipantConfig::from_toml_str(base, "d.toml").unwrap();
    assert_eq!(c.data_dir, None);
    let text = format!("{base}data_dir = \"/var/lib/spindle/1\"");
    let c2 = ParticipantConfig::from_toml_str(&text, "d.toml").unwrap();
    assert_eq!(c2.data_dir, Some(PathBuf::from("/var/lib/spindle/1")));
    c.apply_env(|k| (k == "SPINDLE_DATA_DIR").then(|| "/tmp/x".to_string()))
        .unwrap();
    assert_eq!(c.data_dir, Some(PathBuf::from("/tmp/x")));
    let e = ParticipantConfig::from_toml_str(&format!("{base}data_dir = \"\""), "e.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("e.toml") && e.contains("data_dir"), "{e}");
}

#[test]
fn the_fabric_table_reaches_the_failure_detector() {
    let c = ParticipantConfig::from_toml_str(BOOT, "d.toml").unwrap();
    assert_eq!(
        c.fabric,
        FabricConfig::default(),
        "no table: the fabric defaults"
    );
    let text = format!("{BOOT}[fabric]\nsuspect_floor_ms = 30\nprobe_interval_ms = 5\n");
    let c = ParticipantConfig::from_toml_str(&text, "f.toml").unwrap();
    assert_eq!(c.fabric.suspect_floor_ms, 30);
    assert_eq!(c.fabric.probe_interval_ms, 5);
    assert_eq!(
        c.fabric.suspect_ceiling_ms,
        FabricConfig::default().suspect_ceiling_ms,
        "unset keys keep their defaults"
    );
}

#[test]
fn the_domain_secret_comes_from_the_file_a_key_file_or_the_environment_never_shown() {
    let c = ParticipantConfig::from_toml_str(BOOT, "t.toml").unwrap();
    assert_eq!(
        c.fabric.domain_secret, None,
        "no secret: links unauthenticated"
    );
    let text = format!("{BOOT}[fabric]\ndomain_secret = \"sixteen+ bytes of secret\"\n");
    let c = ParticipantConfig::from_toml_str(&text, "t.toml").unwrap();
    let want = DomainSecret::new(b"sixteen+ bytes of secret").unwrap();
    assert_eq!(c.fabric.domain_secret.as_ref(), Some(&want));
    assert!(c.fabric.encrypt_links, "encrypted by default with a secret");
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("sixteen+"),
        "Debug leaks the secret: {shown}"
    );
    // A key file, and encryption turned off.
    let dir = std::env::temp_dir().join(format!("spindle-cfg-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("domain.key");
    std::fs::write(&key, "sixteen+ bytes of secret\n").unwrap();
    let text = format!(
        "{BOOT}[fabric]\ndomain_secret_file = {:?}\nencrypt_links = false\n",
        key.display().to_string()
    );
    let c = ParticipantConfig::from_toml_str(&text, "t.toml").unwrap();
    assert_eq!(c.fabric.domain_secret.as_ref(), Some(&want));
    assert!(!c.fabric.encrypt_links);
    // The environment overrides, and its errors name the variable, not the value.
    let mut c = ParticipantConfig::from_toml_str(BOOT, "t.toml").unwrap();
    let p = key.display().to_string();
    c.apply_env(|k| (k == "SPINDLE_DOMAIN_SECRET_FILE").then(|| p.clone()))
        .unwrap();
    assert_eq!(c.fabric.domain_secret.as_ref(), Some(&want));
    let short = "[fabric]\ndomain_secret = \"too short\"\n";
    let e = ParticipantConfig::from_toml_str(&format!("{BOOT}{short}"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("domain_secret") && !e.contains("too short"),
        "{e}"
    );
    let e = c
        .apply_env(|k| (k == "SPINDLE_DOMAIN_SECRET").then(|| "too short".to_string()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("SPINDLE_DOMAIN_SECRET") && !e.contains("too short"),
        "{e}"
    );
    let both = format!(
        "{BOOT}[fabric]\ndomain_secret = \"sixteen+ bytes of secret\"\ndomain_secret_file = \"x\"\n"
    );
    let e = ParticipantConfig::from_toml_str(&both, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn impossible_fabric_settings_are_refused_naming_the_key() {
    for (table, want) in [
        (
            "suspect_floor_ms = 500\nsuspect_ceiling_ms = 100",
            "suspect_floor_ms (500) must not exceed suspect_ceiling_ms (100)",
        ),
        (
            "probe_interval_ms = 60",
            "probe_interval_ms (60) must be below",
        ),
        ("suspect_deviations = 0", "suspect_deviations (0)"),
        (
            "read_spin_us = 200000",
            "read_spin_us (200000) must not exceed",
        ),
        ("suspect_floor = 5", "unknown field `suspect_floor`"),
    ] {
        let text = format!("{BOOT}[fabric]\n{table}\n");
        let e = ParticipantConfig::from_toml_str(&text, "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.toml") && e.contains(want), "{e}");
    }
}

#[test]
fn a_contact_address_of_another_transports_form_is_refused_naming_node_and_form() {
    let with = |transport: &str, listen: &str, address: &str| {
        format!(
            "node_id = 2\ntransport = \"{transport}\"\nlisten = \"{listen}\"\n\
             [[contacts]]\nnode = 1\naddress = \"{address}\"\n"
        )
    };
    // The forms each transport reaches members at.
    for text in [
        with("shm", "demo", "@spindle-demo-1"),
        with("tcp", "127.0.0.1:0", "127.0.0.1:7401"),
        with("tcp", "127.0.0.1:0", "localhost:7401"),
        with("tcp", "[::1]:0", "[::1]:7401"),
    ] {
        ParticipantConfig::from_toml_str(&text, "ok.toml").unwrap();
    }
    // A tcp file switched to shm by its transport alone: the join would only time out.
    for (text, want) in [
        (
            with("shm", "demo", "127.0.0.1:7401"),
            "node 1's address \"127.0.0.1:7401\" does not fit transport = \"shm\": an shm \
             member listens at \"@spindle-<its listen namespace>-<its node id>\" (node 1 \
             in this participant's namespace: \"@spindle-demo-1\")",
        ),
        (
            with("shm", "demo", "@spindle-demo-3"),
            "node 1's address \"@spindle-demo-3\"",
        ),
        (
            with("tcp", "127.0.0.1:0", "@spindle-demo-1"),
            "node 1's address \"@spindle-demo-1\" does not fit transport = \"tcp\": a host:port",
        ),
        (with("tcp", "127.0.0.1:0", "127.0.0.1"), "a host:port"),
        (with("tcp", "127.0.0.1:0", ":7401"), "a host:port"),
    ] {
        let e = ParticipantConfig::from_toml_str(&text, "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad.toml: contacts: ") && e.contains(want),
            "{e}"
        );
    }
}
