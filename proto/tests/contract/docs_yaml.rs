//! Every ```yaml block of the reference CloneSet documentation (latest and v0.6, read at
//! test time from `../shared/reference/` beside the repository, or from
//! `$INPLACE_REFERENCE_DIR`) parses and goes through the Rust types without losing a field.
//!
//! The documentation is not in the repository: it is OpenKruise's website text (the
//! CloneSet user manual), published with no licence that would let it be copied here.
//! Where it is absent (a plain clone with nothing beside it) the round-trip test says so
//! on its output and passes without testing anything; where `INPLACE_REFERENCE_DIR` is
//! set, the docs must be there.
//!
//! How blocks are treated, and why:
//! - A complete CloneSet document (with `spec.selector` and `spec.template`) is
//!   deserialized into [`CloneSet`], serialized again, and every field of the input must
//!   be present with the same value in the output (the output may add defaults).
//! - Most blocks are fragments: `kind: CloneSet` with a `spec` holding only the fields a
//!   section talks about (`# ...` stands for the rest). The CRD requires `selector` and
//!   `template`, so the types require them too and a fragment is not a `CloneSet`.
//!   Rather than weaken the types (or invent placeholder fields), a fragment is tested at
//!   the level it is written: `metadata` through `ObjectMeta`, each `spec` field through
//!   the type of that field of [`CloneSetSpec`] (e.g. `updateStrategy` through
//!   [`CloneSetUpdateStrategy`]), `status` through [`CloneSetStatus`]. The dispatch
//!   knows every property of the generated CloneSet spec schema (a test keeps it
//!   complete), and a key it does not know fails the test.
//! - Bare snippets are tested at their level too: a `lifecycle:` block as a spec
//!   fragment, a `type: Progressing` block as a [`CloneSetCondition`].
//! - A field with nothing but a `# ...` comment under it is YAML null: it is listed as a
//!   placeholder (printed, and their number is bounded), not round-tripped.
//! - Anything else must be on the list of known non-CloneSet or unparsable blocks below
//!   (matched by content), so nothing is skipped silently; the test prints them.

use std::io::Write as _;
use std::path::PathBuf;

use inplace_proto::{
    ClaimTemplate, CloneSet, CloneSetCondition, CloneSetScaleStrategy, CloneSetStatus,
    CloneSetUpdateStrategy, Lifecycle, PodTemplate,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Where the reference docs are: `$INPLACE_REFERENCE_DIR` (then they must be there), else
/// `shared/reference` beside the repository (then they may be absent); `None` when they are
/// absent from the default place.
fn reference_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("INPLACE_REFERENCE_DIR") {
        return Some(PathBuf::from(dir));
    }
    // The manifest dir is `<repo>/proto`, so this is `<repo>/../shared/reference`.
    let beside = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/"
    ));
    beside.is_dir().then_some(beside)
}

/// The ```yaml blocks of a markdown text, with their 1-based first line.
fn yaml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut current {
            None if trimmed.starts_with("```yaml") => current = Some((n + 2, String::new())),
            None => {}
            Some(_) if trimmed.starts_with("```") => blocks.extend(current.take()),
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    blocks
}

/// Blocks that are not CloneSets or do not parse, identified by a line they contain.
/// Each must be found exactly once per file it is listed for.
const KNOWN_OTHER: &[(&str, &str, &str)] = &[
    (
        "cloneset-docs-latest.md",
        "controller-revision-hash: demo-cloneset-956df7994",
        "a Pod, showing the revision label",
    ),
    (
        "cloneset-docs-latest.md",
        "  ...\n  replicas: 4",
        "`...` as a placeholder line inside a mapping is not YAML",
    ),
    (
        "cloneset-docs-latest.md",
        "status: False",
        "a Progressing condition whose status is the YAML boolean False, not the string \"False\"",
    ),
    (
        "cloneset-docs-v0.6.md",
        "  # or define with label\n  lifecycle:",
        "two `lifecycle` keys in one mapping (the second is the alternative); duplicate keys are not YAML",
    ),
];

/// Round-trips `value` through `T` and returns what it lost.
fn through<T: DeserializeOwned + Serialize>(
    value: &Value,
    path: &str,
) -> Result<Vec<String>, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| format!("{path}: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("{path}: {e}"))?;
    Ok(super::lost_fields(value, &back, path))
}

/// The `CloneSetSpec` fields, each with the type it deserializes through.
const SPEC_FIELDS: &[&str] = &[
    "replicas",
    "selector",
    "template",
    "volumeClaimTemplates",
    "scaleStrategy",
    "updateStrategy",
    "revisionHistoryLimit",
    "minReadySeconds",
    "lifecycle",
    "progressDeadlineSeconds",
];

fn spec_field(key: &str, value: &Value) -> Result<Vec<String>, String> {
    let path = format!("spec.{key}");
    match key {
        "replicas" | "revisionHistoryLimit" | "minReadySeconds" | "progressDeadlineSeconds" => {
            through::<i32>(value, &path)
        }
        "selector" => through::<LabelSelector>(value, &path),
        "template" => through::<PodTemplate>(value, &path),
        "volumeClaimTemplates" => through::<Vec<ClaimTemplate>>(value, &path),
        "scaleStrategy" => through::<CloneSetScaleStrategy>(value, &path),
        "updateStrategy" => through::<CloneSetUpdateStrategy>(value, &path),
        "lifecycle" => through::<Lifecycle>(value, &path),
        other => Err(format!("spec.{other}: not a CloneSet spec field")),
    }
}

/// Round-trips each field of a spec fragment. A field whose value is empty (`template:`
/// followed only by `# ...`) is a placeholder: it is named in `placeholders`, not tested.
fn spec_fragment(spec: &Value, placeholders: &mut Vec<String>) -> Result<Vec<String>, String> {
    let mut lost = Vec::new();
    for (k, v) in spec.as_object().into_iter().flatten() {
        if v.is_null() {
            placeholders.push(format!("spec.{k}"));
            continue;
        }
        lost.extend(spec_field(k, v)?);
    }
    Ok(lost)
}

/// How a block was tested.
#[derive(Debug, PartialEq)]
enum Tested {
    Full,
    Fragment,
    SpecSnippet,
    Condition,
}

fn test_block(
    doc: &Value,
    placeholders: &mut Vec<String>,
) -> Result<Option<(Tested, Vec<String>)>, String> {
    let Some(map) = doc.as_object() else {
        return Ok(None);
    };
    if map.get("kind").and_then(Value::as_str) == Some("CloneSet") {
        let spec = map.get("spec").cloned().unwrap_or(Value::Null);
        let complete = spec.get("selector").is_some() && spec.get("template").is_some();
        if complete {
            return through::<CloneSet>(doc, "").map(|l| Some((Tested::Full, l)));
        }
        let mut lost = Vec::new();
        for (k, v) in map {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => lost.extend(through::<ObjectMeta>(v, ".metadata")?),
                "spec" => lost.extend(spec_fragment(v, placeholders)?),
                "status" => lost.extend(through::<CloneSetStatus>(v, ".status")?),
                other => return Err(format!("{other}: not a CloneSet field")),
            }
        }
        return Ok(Some((Tested::Fragment, lost)));
    }
    if !map.is_empty() && map.keys().all(|k| SPEC_FIELDS.contains(&k.as_str())) {
        return spec_fragment(doc, placeholders).map(|l| Some((Tested::SpecSnippet, l)));
    }
    if map.get("type").is_some() && map.get("status").is_some() && map.get("kind").is_none() {
        return through::<CloneSetCondition>(doc, "condition")
            .map(|l| Some((Tested::Condition, l)))
            .or(Ok(None));
    }
    Ok(None)
}

#[test]
fn spec_dispatch_knows_every_spec_field() {
    let props = super::schema("CloneSet")["properties"]["spec"]["properties"]
        .as_object()
        .expect("spec properties");
    let mut schema_fields: Vec<&str> = props.keys().map(String::as_str).collect();
    let mut known = SPEC_FIELDS.to_vec();
    schema_fields.sort_unstable();
    known.sort_unstable();
    assert_eq!(schema_fields, known);
    for field in SPEC_FIELDS {
        // Each known field has a type in the dispatch (an empty object or 0 may not
        // deserialize, but the error must not be "not a CloneSet spec field").
        if let Err(e) = spec_field(field, &Value::Null) {
            assert!(!e.contains("not a CloneSet spec field"), "{e}");
        }
    }
}

#[test]
fn reference_yaml_blocks_round_trip() {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut others_found = Vec::new();
    let mut failures = Vec::new();
    let mut placeholders = Vec::new();
    let mut total = 0;
    let Some(dir) = reference_dir() else {
        // Written to the process's stderr, not with `eprintln!`, which the test harness
        // captures and shows only for a failing test: a skip must be seen.
        let _ = writeln!(
            std::io::stderr(),
            "reference_yaml_blocks_round_trip SKIPPED: the reference docs are not beside the \
             repository ({}/../shared/reference is absent) and INPLACE_REFERENCE_DIR is not \
             set; no yaml block of the CloneSet docs was tested",
            concat!(env!("CARGO_MANIFEST_DIR"), "/..")
        );
        return;
    };
    for file in ["cloneset-docs-latest.md", "cloneset-docs-v0.6.md"] {
        let path = dir.join(file);
        let markdown = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the reference docs live in ../shared/reference beside the repository, \
                 or in $INPLACE_REFERENCE_DIR)",
                path.display()
            )
        });
        let blocks = yaml_blocks(&markdown);
        assert!(
            blocks.len() >= 10,
            "{file}: only {} yaml blocks found",
            blocks.len()
        );
        for (line, text) in blocks {
            total += 1;
            let here = format!("{file}:{line}");
            let parsed: Result<Value, _> = serde_saphyr::from_str(&text);
            let mut holes = Vec::new();
            let outcome = match &parsed {
                Ok(doc) => test_block(doc, &mut holes),
                Err(_) => Ok(None),
            };
            if !holes.is_empty() {
                placeholders.push(format!("{here}: {}", holes.join(", ")));
            }
            match outcome {
                Ok(Some((how, lost))) => {
                    *counts.entry(format!("{how:?}")).or_default() += 1;
                    if !lost.is_empty() {
                        failures.push(format!("{here}: lost {lost:?}"));
                    }
                }
                Ok(None) | Err(_) => {
                    let known = KNOWN_OTHER
                        .iter()
                        .find(|(f, marker, _)| *f == file && text.contains(marker));
                    match known {
                        Some((_, marker, why)) => others_found.push((file, *marker, format!("{here}: {why}"))),
                        None => failures.push(format!(
                            "{here}: neither a CloneSet (fragment) nor a known other block: {}\n{text}",
                            match (&parsed, &outcome) {
                                (Err(e), _) => format!("YAML error {e}"),
                                (_, Err(e)) => e.clone(),
                                _ => "unrecognised document".to_owned(),
                            }
                        )),
                    }
                }
            }
        }
    }
    println!("{total} yaml blocks; round-tripped: {counts:?}");
    for (_, _, what) in &others_found {
        println!("  not a CloneSet, known: {what}");
    }
    for what in &placeholders {
        println!("  placeholder field (`# ...` only), not tested: {what}");
    }
    assert!(
        placeholders.len() <= 2,
        "more placeholder-only fields than expected: {placeholders:?}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for (file, marker, why) in KNOWN_OTHER {
        let n = others_found
            .iter()
            .filter(|(f, m, _)| f == file && m == marker)
            .count();
        assert_eq!(n, 1, "{file}: known block `{why}` found {n} times");
    }
    assert_eq!(others_found.len(), KNOWN_OTHER.len());
    assert!(counts.get("Full").copied().unwrap_or(0) >= 4, "{counts:?}");
}

#[test]
fn block_extraction_reads_fenced_yaml_only() {
    let md = "text\n```yaml\na: 1\n```\n```bash\nls\n```\n  ```yaml\n  b: 2\n  ```\n";
    let blocks = yaml_blocks(md);
    assert_eq!(
        blocks,
        [(3, "a: 1\n".to_owned()), (9, "  b: 2\n".to_owned())]
    );
}
