//! Many topics across processes: three participants, 1,000 topics, a SIGKILL between two
//! rounds of writes. Every surviving reader holds exactly its topic's samples — none of
//! another topic, none twice, in its writer's order; of the killed writer's samples,
//! all or none, the same at every survivor.

use std::collections::BTreeMap;
use std::process::Command;

use spindle_examples::many_topics::{readers_of, topic_name, writer_of, PARTICIPANTS};
use spindle_examples::parse_log;

const TOPICS: usize = 1000;

fn run(transport: &str) {
    let dir = std::env::temp_dir().join(format!(
        "spindle-many-topics-test-{transport}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_many_topics"))
        .args([
            "--transport",
            transport,
            "--topics",
            &TOPICS.to_string(),
            "--out",
        ])
        .arg(&dir)
        .output()
        .expect("run many_topics");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "many_topics over {transport} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let survivors: Vec<u32> = (1..PARTICIPANTS).collect();
    let mut killed_writer_lists = 0;
    for i in 0..TOPICS {
        let mut lists = BTreeMap::new();
        for node in readers_of(i).into_iter().filter(|n| survivors.contains(n)) {
            let name = format!("{node}-{}", topic_name(i));
            let text = std::fs::read_to_string(dir.join(format!("{name}.log")))
                .unwrap_or_else(|e| panic!("{transport}: {name}.log: {e}\n{stdout}"));
            let log = parse_log(&name, &text).expect("well-formed log");
            let values: Vec<String> = log.iter().map(|l| l.key.clone()).collect();
            let seqs: Vec<u64> = log.iter().map(|l| l.writer_seq).collect();
            assert_eq!(
                seqs,
                (1..=seqs.len() as u64).collect::<Vec<_>>(),
                "{transport}: {name}: its writer's order, once each"
            );
            let all = [format!("{i}-0"), format!("{i}-1")];
            if writer_of(i) == PARTICIPANTS {
                // Killed after its first round: all or none of it.
                assert!(values.len() <= 1, "{transport}: {name}: {values:?}");
                assert_eq!(values[..], all[..values.len()], "{transport}: {name}");
                killed_writer_lists += 1;
            } else {
                assert_eq!(
                    values, all,
                    "{transport}: {name}: exactly its topic's samples"
                );
            }
            lists.insert(node, log);
        }
        if lists.len() == 2 {
            let [a, b]: [&Vec<_>; 2] = [&lists[&1], &lists[&2]];
            assert_eq!(a, b, "{transport}: topic {i}: the survivors disagree");
        }
    }
    assert!(
        killed_writer_lists > 0,
        "the killed participant wrote topics read by survivors"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_thousand_topics_over_tcp_survive_a_sigkill() {
    run("tcp");
}

#[test]
fn a_thousand_topics_over_shm_survive_a_sigkill() {
    run("shm");
}

/// A transport the examples do not know is bad usage (exit 2), refused before any
/// process starts, by `many_topics` and `avionics` (and its recorder) alike.
#[test]
fn an_unknown_transport_is_bad_usage() {
    for (bin, args) in [
        (
            env!("CARGO_BIN_EXE_many_topics"),
            &["--transport", "udp"][..],
        ),
        (env!("CARGO_BIN_EXE_avionics"), &["--transport", "udp"]),
        (
            env!("CARGO_BIN_EXE_avionics"),
            &["recorder", "--transport", "udp"],
        ),
    ] {
        let out = Command::new(bin).args(args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bin} {args:?}: {err}");
        assert!(err.contains("possible values: tcp, shm"), "{err}");
        assert!(
            out.stdout.is_empty(),
            "{bin} {args:?} started: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
