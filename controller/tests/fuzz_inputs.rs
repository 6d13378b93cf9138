//! Fuzzing of what the controller reads from others (issue 12 item 7), with proptest on
//! stable Rust: arbitrary text and structurally mutated manifests through the plugin's
//! parsers (`kubectl inplace plan`: CloneSet, pods, ControllerRevisions, PVCs), then the
//! whole planner and both renderings on whatever parses; and garbage in the annotations
//! and labels other writers own (the in-place update state, lifecycle state, revision and
//! instance labels, deletion markers). The property everywhere: no panic; bad input is an
//! error (or a problem the plan reports), never a crash.
//!
//! `INPLACE_FUZZ_CASES=N` runs N cases per target (default 256, the fast tier's share);
//! `INPLACE_FUZZ_SEED=S` draws other cases than the fixed default seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use inplace_controller::cli::{self, Format, Inputs, Settings, input::Source};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{Map, Value};

const CLONESET: &str = include_str!("fixtures/plan/partition-cloneset.yaml");
const PODS: &str = include_str!("fixtures/plan/partition-pods.yaml");
const REVISIONS: &str = include_str!("fixtures/plan/partition-revisions.yaml");
const SCALE_CLONESET: &str = include_str!("fixtures/plan/scale-up-cloneset.yaml");
const SCALE_PODS: &str = include_str!("fixtures/plan/scale-up-pods.yaml");
const SCALE_PVCS: &str = include_str!("fixtures/plan/scale-up-pvcs.yaml");

fn config() -> ProptestConfig {
    let cases = std::env::var("INPLACE_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    // A fixed seed by default: the fast tier runs the same cases every time (a new
    // finding fails where it was found, not at random in CI); INPLACE_FUZZ_SEED explores.
    let seed = std::env::var("INPLACE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_124);
    ProptestConfig {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        // A failure is a panic somewhere deep: shrinking it costs more than it tells.
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    }
}

/// Strings other writers put where we expect numbers, percentages, JSON or names.
fn tricky_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("50%".to_owned()),
        Just("101%".to_owned()),
        Just("-20%".to_owned()),
        Just("%".to_owned()),
        Just("9999999999999999999999%".to_owned()),
        Just("-1".to_owned()),
        Just("1e309".to_owned()),
        Just("null".to_owned()),
        Just("{}".to_owned()),
        Just("[]".to_owned()),
        Just("{\"revision\":1}".to_owned()),
        Just("{\"lastContainerStatuses\":{\"app\":{\"imageID\":7}}}".to_owned()),
        Just("{\"revision\":\"r\",\"containerBatchesRecord\":[{\"containers\":null}]}".to_owned()),
        Just("{\"revision\":\"r\",\"nextContainerImages\":{\"\":\"\"}}".to_owned()),
        Just("PreparingUpdate".to_owned()),
        Just("Updated".to_owned()),
        Just("true".to_owned()),
        Just("2026-13-45T99:99:99Z".to_owned()),
        Just("\u{0}\u{7f}\u{feff}".to_owned()),
        ".{0,24}",
    ]
}

/// Arbitrary JSON, biased towards what a manifest holds.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-3i64..5).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        tricky_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(tricky_string(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One edit of a document, at the node `at` (an index into its nodes, wrapping).
#[derive(Clone, Debug)]
struct Edit {
    at: usize,
    change: Change,
}

#[derive(Clone, Debug)]
enum Change {
    /// Any JSON in its place (mostly refused by the typed parsers).
    Replace(Value),
    /// The node removed.
    Remove,
    /// A value of the node's own type (most of these parse and reach the planner): a
    /// number for a number, a string for a string, a boolean for a boolean.
    SameType {
        number: i64,
        string: String,
        boolean: bool,
    },
}

fn numbers() -> impl Strategy<Value = i64> {
    prop_oneof![
        -3i64..12,
        Just(i64::from(i32::MAX)),
        Just(i64::from(i32::MIN)),
        Just(i64::MAX),
        Just(i64::MIN),
        any::<i64>(),
    ]
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let change = prop_oneof![
        2 => value().prop_map(Change::Replace),
        1 => Just(Change::Remove),
        6 => (numbers(), tricky_string(), any::<bool>())
            .prop_map(|(number, string, boolean)| Change::SameType { number, string, boolean }),
    ];
    prop::collection::vec(
        (any::<usize>(), change).prop_map(|(at, change)| Edit { at, change }),
        0..6,
    )
}

/// The paths of every node below the root.
fn paths(v: &Value, prefix: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                prefix.push(PathStep::Key(k.clone()));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(PathStep::Index(i));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn apply(doc: &mut Value, edits: &[Edit]) {
    for e in edits {
        let mut all = Vec::new();
        paths(doc, &mut Vec::new(), &mut all);
        if all.is_empty() {
            return;
        }
        let path = &all[e.at % all.len()];
        let (last, parents) = path.split_last().expect("non-empty path");
        let mut node = &mut *doc;
        for step in parents {
            node = match step {
                PathStep::Key(k) => &mut node[k.as_str()],
                PathStep::Index(i) => &mut node[*i],
            };
        }
        let target = match last {
            PathStep::Key(k) => &mut node[k.as_str()],
            PathStep::Index(i) => &mut node[*i],
        };
        match &e.change {
            Change::Replace(v) => *target = v.clone(),
            Change::SameType {
                number,
                string,
                boolean,
            } => match target {
                Value::Number(_) => *target = Value::from(*number),
                Value::String(_) => *target = Value::String(yaml_printable(string)),
                Value::Bool(_) => *target = Value::Bool(*boolean),
                _ => {}
            },
            Change::Remove => match (last, node) {
                (PathStep::Key(k), Value::Object(m)) => {
                    m.remove(k);
                }
                (PathStep::Index(i), Value::Array(a)) => {
                    a.remove(*i);
                }
                _ => {}
            },
        }
    }
}

/// A YAML stream of documents parsed as JSON values (the fixtures are small and valid).
fn docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("fixture parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn text(docs: &[Value]) -> String {
    // JSON is YAML: one document per `---`.
    docs.iter()
        .map(|d| serde_json::to_string(d).expect("serializes"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// How far an input got.
#[derive(Debug, PartialEq, Eq)]
enum Reached {
    /// Refused by the parsers (with an error, not a panic).
    Refused,
    /// Loaded; the planner refused it with an error.
    Loaded,
    /// Planned and rendered both ways.
    Planned,
}

/// Loads, plans and renders; an error is fine, a panic is the failure.
fn plan_all(cloneset: &str, pods: &str, revisions: Option<&str>, pvcs: Option<&str>) -> Reached {
    let source = |name, text| Source { name, text };
    let loaded: Result<Inputs, _> = cli::load(
        source("cloneset.yaml", cloneset),
        Some(source("pods.yaml", pods)),
        revisions.map(|t| source("revisions.yaml", t)),
        pvcs.map(|t| source("pvcs.yaml", t)),
    );
    let Ok(inputs) = loaded else {
        return Reached::Refused;
    };
    let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("a time");
    match cli::compute(&inputs, &Settings::default(), now, "cloneset.yaml") {
        Ok(report) => {
            let json = cli::render(&report, &inputs, Format::Json);
            assert!(
                serde_json::from_str::<Value>(&json).is_ok(),
                "-o json is JSON: {json}"
            );
            let _ = cli::render(&report, &inputs, Format::Table);
            Reached::Planned
        }
        Err(_) => Reached::Loaded,
    }
}

/// `s` with the characters YAML cannot carry unescaped (and serde_json leaves raw)
/// replaced: the pods file is YAML, and `kubectl get -o yaml` escapes them.
fn yaml_printable(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{7f}'..='\u{9f}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' => '?',
            c => c,
        })
        .collect()
}

/// Garbage where other writers own the value: state annotation, lifecycle, revision and
/// instance labels, specified-delete and the in-place grace annotation.
fn foreign_metadata() -> impl Strategy<Value = Vec<(usize, &'static str, &'static str, String)>> {
    let keys = prop_oneof![
        Just(("annotations", "apps.kruise.io/inplace-update-state")),
        Just(("annotations", "inplace-update-state")),
        Just(("annotations", "apps.kruise.io/inplace-update-grace")),
        Just(("annotations", "lifecycle.apps.kruise.io/timestamp")),
        Just(("labels", "lifecycle.apps.kruise.io/state")),
        Just(("labels", "controller-revision-hash")),
        Just(("labels", "apps.kruise.io/cloneset-instance-id")),
        Just(("labels", "apps.kruise.io/specified-delete")),
        Just(("labels", "pod-template-hash")),
    ];
    prop::collection::vec(
        (any::<usize>(), keys, tricky_string()).prop_map(|(i, (f, k), v)| (i, f, k, v)),
        0..6,
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_is_an_error_or_a_manifest(text in ".{0,300}") {
        let s = Source { name: "f.yaml", text: &text };
        let _ = cli::input::cloneset(s);
        let _ = cli::input::pods(s);
        let _ = cli::input::revisions(s);
        let _ = cli::input::pvcs(s);
        plan_all(&text, &text, Some(&text), Some(&text));
    }

    #[test]
    fn cut_or_damaged_yaml_is_an_error_or_a_plan(cut in 0usize..4000, byte in any::<u8>(), at in any::<usize>()) {
        for fixture in [CLONESET, PODS, REVISIONS] {
            let mut bytes = fixture.as_bytes()[..cut.min(fixture.len())].to_vec();
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = byte;
            }
            let damaged = String::from_utf8_lossy(&bytes);
            let s = Source { name: "f.yaml", text: &damaged };
            let _ = cli::input::cloneset(s);
            let _ = cli::input::pods(s);
            let _ = cli::input::revisions(s);
        }
    }

    #[test]
    fn mutated_manifests_plan_or_fail_cleanly(
        cs_edits in edits(),
        pod_edits in edits(),
        rev_edits in edits(),
        scale in any::<bool>(),
    ) {
        let (cs, pods, extra) = if scale {
            (SCALE_CLONESET, SCALE_PODS, SCALE_PVCS)
        } else {
            (CLONESET, PODS, REVISIONS)
        };
        let mut cs_docs = docs(cs);
        let mut pod_docs = docs(pods);
        let mut extra_docs = docs(extra);
        for d in &mut cs_docs { apply(d, &cs_edits); }
        for d in &mut pod_docs { apply(d, &pod_edits); }
        for d in &mut extra_docs { apply(d, &rev_edits); }
        let extra_text = text(&extra_docs);
        if scale {
            plan_all(&text(&cs_docs), &text(&pod_docs), None, Some(&extra_text));
        } else {
            plan_all(&text(&cs_docs), &text(&pod_docs), Some(&extra_text), None);
        }
    }

    #[test]
    fn foreign_annotations_and_labels_never_crash_the_planner(
        marks in foreign_metadata(),
        scale in any::<bool>(),
    ) {
        let (cs, pods, extra) = if scale {
            (SCALE_CLONESET, SCALE_PODS, SCALE_PVCS)
        } else {
            (CLONESET, PODS, REVISIONS)
        };
        let mut pod_docs = docs(pods);
        for doc in &mut pod_docs {
            let items: Vec<&mut Value> = match doc["items"].as_array_mut() {
                Some(items) => items.iter_mut().collect(),
                None => vec![doc],
            };
            let n = items.len();
            let mut items = items;
            for (i, field, key, v) in &marks {
                if n == 0 { break; }
                let pod = &mut items[i % n];
                if !pod["metadata"][*field].is_object() {
                    pod["metadata"][*field] = Value::Object(Map::new());
                }
                pod["metadata"][*field][*key] = Value::String(yaml_printable(v));
            }
        }
        // Only string values changed: every such input loads and is planned (the garbage
        // is the planner's to judge, as a problem or a skipped pod).
        let reached = if scale {
            plan_all(cs, &text(&pod_docs), None, Some(extra))
        } else {
            plan_all(cs, &text(&pod_docs), Some(extra), None)
        };
        prop_assert_eq!(reached, Reached::Planned);
    }

    /// The unmutated fixtures plan: the mutations start from inputs that reach the planner.
    #[test]
    fn the_fixtures_themselves_are_planned(scale in any::<bool>()) {
        let reached = if scale {
            plan_all(SCALE_CLONESET, SCALE_PODS, None, Some(SCALE_PVCS))
        } else {
            plan_all(CLONESET, PODS, Some(REVISIONS), None)
        };
        prop_assert_eq!(reached, Reached::Planned);
    }
}

/// Found by the mutation target (it ran for minutes and took gigabytes): the largest
/// numbers a manifest can carry are planned in bounded time and memory.
#[test]
fn the_largest_numbers_are_planned_in_bounded_steps() {
    for (field, value) in [
        ("/spec/replicas", Value::from(i32::MAX)),
        ("/spec/updateStrategy/partition", Value::from(i32::MAX)),
        ("/spec/updateStrategy/maxSurge", Value::from(i32::MAX)),
        ("/spec/updateStrategy/maxUnavailable", Value::from(i32::MAX)),
        ("/spec/revisionHistoryLimit", Value::from(i32::MAX)),
        ("/spec/minReadySeconds", Value::from(i32::MAX)),
    ] {
        for (cs, pods, extra, scale) in [
            (CLONESET, PODS, REVISIONS, false),
            (SCALE_CLONESET, SCALE_PODS, SCALE_PVCS, true),
        ] {
            let mut doc = docs(cs).remove(0);
            let (parent, key) = field.rsplit_once('/').expect("a path");
            if doc.pointer(parent).is_none_or(|p| !p.is_object()) {
                continue;
            }
            if let Some(p) = doc.pointer_mut(parent) {
                p[key] = value.clone();
            }
            let text = text(&[doc]);
            let reached = if scale {
                plan_all(&text, pods, None, Some(extra))
            } else {
                plan_all(&text, pods, Some(extra), None)
            };
            assert_ne!(reached, Reached::Refused, "{field} = {value}");
        }
    }
}
