//! Reading the plan command's YAML files into typed objects, with errors that fit on one
//! line and name the file and the field.
//!
//! - YAML syntax errors name the line and column: `pods.yaml:7:22: unclosed bracket '['`.
//! - Type errors name the field path: `cloneset.yaml: spec.replicas: invalid type: string
//!   "abc", expected i32`. Items of a `List` are `items[3].…`; documents of a stream past
//!   the first are `document 2: …`.
//! - A pods file is what `kubectl get pods -o yaml` prints (a `List`, or a `PodList`), a
//!   single Pod, or a multi-document stream of Pods and Lists; empty documents are skipped.
//! - A CloneSet file holds exactly one CloneSet (`apps.kruise.io/v1alpha1`); `kind` and
//!   `apiVersion` may be left out.

use std::fmt;

use inplace_proto::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// One input file: a name to show in errors and its text.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

/// Bad input, reported as one line naming the file and the place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    pub file: String,
    /// `line:column` of a syntax error, or the field path of a type error (may be empty).
    pub place: Place,
    pub message: String,
}

/// Where in a file the problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    Nowhere,
    Position { line: u64, column: u64 },
    Field(String),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = one_line(&self.message);
        match &self.place {
            Place::Nowhere => write!(f, "{}: {message}", self.file),
            Place::Position { line, column } => {
                write!(f, "{}:{line}:{column}: {message}", self.file)
            }
            Place::Field(path) => write!(f, "{}: {path}: {message}", self.file),
        }
    }
}

impl std::error::Error for InputError {}

impl InputError {
    pub fn new(file: &str, place: Place, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            place,
            message: message.into(),
        }
    }

    pub fn field(file: &str, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(file, Place::Field(path.into()), message)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The YAML documents of `source` as JSON values (empty documents dropped), each with its
/// 1-based document number.
pub fn documents(source: Source<'_>) -> Result<Vec<(usize, Value)>, InputError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(source.text).map_err(|e| {
        let place = e.location().map_or(Place::Nowhere, |l| Place::Position {
            line: l.line(),
            column: l.column(),
        });
        let text = e.without_snippet().to_string();
        let text = text.strip_prefix("error: ").unwrap_or(&text);
        // "line 6 column 13: message" repeats the position.
        let text = match (&place, text.split_once(": ")) {
            (Place::Position { .. }, Some((head, rest))) if head.starts_with("line ") => rest,
            _ => text,
        };
        InputError::new(source.name, place, text)
    })?;
    Ok(docs
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_null())
        .map(|(i, v)| (i + 1, v))
        .collect())
}

/// Converts `value` to `T`, naming the failing field as `prefix` + path.
fn typed<T: DeserializeOwned>(file: &str, prefix: &str, value: Value) -> Result<T, InputError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let path = match (prefix.is_empty(), path.as_str()) {
            (true, ".") => String::new(),
            (true, _) => path,
            (false, ".") => prefix.to_owned(),
            (false, _) => format!("{prefix}.{path}"),
        };
        let place = if path.is_empty() {
            Place::Nowhere
        } else {
            Place::Field(path)
        };
        InputError::new(file, place, e.inner().to_string())
    })
}

fn doc_prefix(number: usize, total: usize) -> String {
    if total > 1 {
        format!("document {number}")
    } else {
        String::new()
    }
}

fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_owned()
    } else {
        format!("{prefix}: {field}")
    }
}

fn check_kind(
    file: &str,
    prefix: &str,
    value: &Value,
    kinds: &[&str],
    api_versions: &[&str],
) -> Result<(), InputError> {
    if !value.is_object() {
        return Err(InputError::new(
            file,
            if prefix.is_empty() {
                Place::Nowhere
            } else {
                Place::Field(prefix.to_owned())
            },
            format!("expected a {} object", kinds[0]),
        ));
    }
    if let Some(kind) = value.get("kind")
        && !kind.as_str().is_some_and(|k| kinds.contains(&k))
    {
        return Err(InputError::field(
            file,
            join(prefix, "kind"),
            format!("expected {}, got {kind}", kinds.join(" or ")),
        ));
    }
    if let Some(version) = value.get("apiVersion")
        && !version.as_str().is_some_and(|v| api_versions.contains(&v))
    {
        return Err(InputError::field(
            file,
            join(prefix, "apiVersion"),
            format!("expected {}, got {version}", api_versions.join(" or ")),
        ));
    }
    Ok(())
}

/// The one CloneSet of `source`.
pub fn cloneset(source: Source<'_>) -> Result<CloneSet, InputError> {
    let mut docs = documents(source)?;
    if docs.len() != 1 {
        return Err(InputError::new(
            source.name,
            Place::Nowhere,
            format!("expected one CloneSet, found {} documents", docs.len()),
        ));
    }
    let (_, mut value) = docs.remove(0);
    check_kind(
        source.name,
        "",
        &value,
        &["CloneSet"],
        &["apps.kruise.io/v1alpha1"],
    )?;
    // The derived type wants both; a bare spec file is fine for a what-if.
    if let Some(obj) = value.as_object_mut() {
        obj.entry("apiVersion")
            .or_insert_with(|| Value::from("apps.kruise.io/v1alpha1"));
        obj.entry("kind").or_insert_with(|| Value::from("CloneSet"));
        obj.entry("metadata")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    typed(source.name, "", value)
}

/// Objects of kind `kind` in `source`: single objects and items of lists.
fn objects<T: DeserializeOwned>(
    source: Source<'_>,
    kind: &str,
    api_versions: &[&str],
) -> Result<Vec<T>, InputError> {
    let docs = documents(source)?;
    let total = docs.len();
    let list_kind = format!("{kind}List");
    let mut out = Vec::new();
    for (number, value) in docs {
        let prefix = doc_prefix(number, total);
        let is_list = value
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k == "List" || k == list_kind)
            || (value.get("kind").is_none() && value.get("items").is_some());
        if is_list {
            let items = match value.get("items") {
                None | Some(Value::Null) => continue,
                Some(Value::Array(items)) => items.clone(),
                Some(other) => {
                    return Err(InputError::field(
                        source.name,
                        join(&prefix, "items"),
                        format!("expected a list of {kind}s, got {other}"),
                    ));
                }
            };
            for (i, item) in items.into_iter().enumerate() {
                let at = join(&prefix, &format!("items[{i}]"));
                check_kind(source.name, &at, &item, &[kind], api_versions)?;
                out.push(typed(source.name, &at, item)?);
            }
        } else {
            check_kind(source.name, &prefix, &value, &[kind], api_versions)?;
            out.push(typed(source.name, &prefix, value)?);
        }
    }
    Ok(out)
}

/// The pods of `source` (a `List`, a `PodList`, Pods, or a stream of those).
pub fn pods(source: Source<'_>) -> Result<Vec<Pod>, InputError> {
    objects(source, "Pod", &["v1"])
}

/// The PersistentVolumeClaims of `source` (`kubectl get pvc -o yaml`).
pub fn pvcs(source: Source<'_>) -> Result<Vec<PersistentVolumeClaim>, InputError> {
    objects(source, "PersistentVolumeClaim", &["v1"])
}

/// The ControllerRevisions of `source` (`kubectl get controllerrevisions -o yaml`).
pub fn revisions(source: Source<'_>) -> Result<Vec<ControllerRevision>, InputError> {
    objects(source, "ControllerRevision", &["apps/v1"])
}

/// The ImagePullJobs of `source` (`kubectl get imagepulljobs -o yaml`).
pub fn image_pull_jobs(source: Source<'_>) -> Result<Vec<ImagePullJob>, InputError> {
    objects(
        source,
        "ImagePullJob",
        &["apps.kruise.io/v1beta1", "apps.kruise.io/v1alpha1"],
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use proptest::prelude::*;

    use super::*;

    fn src(text: &str) -> Source<'_> {
        Source {
            name: "in.yaml",
            text,
        }
    }

    const CS: &str = "apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: demo
spec:
  replicas: 3
  selector:
    matchLabels: {app: demo}
  template:
    metadata:
      labels: {app: demo}
    spec:
      containers:
      - name: main
        image: nginx:1
";

    #[test]
    fn cloneset_file_parses_with_or_without_kind_and_api_version() {
        let cs = cloneset(src(CS)).unwrap();
        assert_eq!(cs.replicas(), 3);
        let bare = CS.lines().skip(2).collect::<Vec<_>>().join("\n");
        assert_eq!(
            cloneset(src(&bare)).unwrap().metadata.name.as_deref(),
            Some("demo")
        );
    }

    #[test]
    fn wrong_type_names_the_field_path() {
        let bad = CS.replace("replicas: 3", "replicas: three");
        let e = cloneset(src(&bad)).unwrap_err();
        assert_eq!(e.place, Place::Field("spec.replicas".into()));
        assert!(
            e.to_string()
                .starts_with("in.yaml: spec.replicas: invalid type")
        );
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn syntax_error_names_line_and_column_on_one_line() {
        let e = cloneset(src("spec:\n  replicas: [\n")).unwrap_err();
        assert!(matches!(e.place, Place::Position { line: 2, .. }), "{e:?}");
        let line = e.to_string();
        assert!(line.starts_with("in.yaml:2:"), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn wrong_kind_is_rejected() {
        let e = cloneset(src(&CS.replace("kind: CloneSet", "kind: Deployment"))).unwrap_err();
        assert_eq!(e.place, Place::Field("kind".into()));
        let e = cloneset(src(&CS.replace("v1alpha1", "v1beta1"))).unwrap_err();
        assert_eq!(e.place, Place::Field("apiVersion".into()));
    }

    #[test]
    fn pods_come_from_a_list_or_a_stream() {
        let list = "apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: a}
- metadata: {name: b}
";
        let names = |pods: Vec<Pod>| -> Vec<String> {
            pods.into_iter()
                .map(|p| p.metadata.name.unwrap_or_default())
                .collect()
        };
        assert_eq!(names(pods(src(list)).unwrap()), ["a", "b"]);
        let stream = "---\nkind: Pod\nmetadata: {name: a}\n---\n---\nmetadata: {name: b}\n";
        assert_eq!(names(pods(src(stream)).unwrap()), ["a", "b"]);
        let empty_list = "apiVersion: v1\nkind: List\nitems: []\n";
        assert!(pods(src(empty_list)).unwrap().is_empty());
        assert!(pods(src("")).unwrap().is_empty());
    }

    #[test]
    fn bad_pod_field_in_a_list_names_the_item() {
        let list = "kind: List
items:
- metadata: {name: a}
  spec:
    containers:
    - name: c
      ports:
      - containerPort: http
";
        let e = pods(src(list)).unwrap_err();
        assert_eq!(
            e.place,
            Place::Field("items[0].spec.containers[0].ports[0].containerPort".into())
        );
        let stream = "metadata: {name: a}\n---\nkind: Service\n";
        let e = pods(src(stream)).unwrap_err();
        assert_eq!(e.place, Place::Field("document 2: kind".into()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Random text never panics the parsers.
        #[test]
        fn random_text_never_panics(text in ".{0,300}") {
            let _ = cloneset(src(&text));
            let _ = pods(src(&text));
            let _ = revisions(src(&text));
        }

        /// Every prefix of a valid file parses or fails with a one-line error.
        #[test]
        fn truncated_yaml_never_panics(cut in 0usize..CS.len()) {
            let text = &CS[..cut];
            match cloneset(src(text)) {
                Ok(_) => {}
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
            let _ = pods(src(text));
        }
    }
}
