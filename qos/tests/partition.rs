//! Partition matching with fnmatch wildcards.

use spindle_qos::{partitions_match, Partition};

fn p(names: &[&str]) -> Partition {
    Partition {
        name: names.iter().map(|s| s.to_string()).collect(),
    }
}

#[track_caller]
fn both_ways(a: &[&str], b: &[&str], expected: bool) {
    assert_eq!(partitions_match(&p(a), &p(b)), expected, "{a:?} vs {b:?}");
    assert_eq!(partitions_match(&p(b), &p(a)), expected, "{b:?} vs {a:?}");
}

#[test]
fn exact() {
    both_ways(&["A"], &["A"], true);
    both_ways(&["A"], &["B"], false);
    both_ways(&["A", "B"], &["C", "B"], true);
    both_ways(&["A", "B"], &["C", "D"], false);
    both_ways(&["abc"], &["ABC"], false);
}

#[test]
fn star() {
    both_ways(&["sensors/*"], &["sensors/lidar"], true);
    both_ways(&["sensors/*"], &["sensors/"], true);
    both_ways(&["sensors/*"], &["actuators/arm"], false);
    both_ways(&["*"], &["anything"], true);
    both_ways(&["a*b*c"], &["aXXbYYc"], true);
    both_ways(&["a*b*c"], &["aXXbYY"], false);
}

#[test]
fn question_mark() {
    both_ways(&["room?"], &["room1"], true);
    both_ways(&["room?"], &["room"], false);
    both_ways(&["room?"], &["room12"], false);
    both_ways(&["r??m"], &["room"], true);
}

#[test]
fn bracket() {
    both_ways(&["[ab]x"], &["ax"], true);
    both_ways(&["[ab]x"], &["bx"], true);
    both_ways(&["[ab]x"], &["cx"], false);
    both_ways(&["[a-c]x"], &["bx"], true);
    both_ways(&["[!ab]x"], &["cx"], true);
    both_ways(&["[!ab]x"], &["ax"], false);
    both_ways(&["x[ab]"], &["x"], false);
}

#[test]
fn default_partition() {
    both_ways(&[], &[], true);
    both_ways(&[], &["A"], false);
    both_ways(&[], &["*"], true);
    both_ways(&[], &["?"], false);
    both_ways(&[], &["A", "*"], true);
}

#[test]
fn pattern_versus_pattern() {
    both_ways(&["A*"], &["A*"], true);
    both_ways(&["A*"], &["A?"], false);
    both_ways(&["*"], &["A*"], false);
    both_ways(&["[ab]"], &["[ab]"], true);
    both_ways(&["[ab]"], &["?"], false);
}

#[test]
fn long_pathological_patterns_are_fast() {
    let text = "a".repeat(5_000);
    let pattern = format!("{}b", "*a".repeat(500));
    let start = std::time::Instant::now();
    both_ways(&[&pattern], &[&text], false);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}
