//! Label selectors: parsing a `metav1.LabelSelector`, matching label sets, and the string
//! form written to `status.labelSelector`.
//!
//! The rules are Kubernetes' `LabelSelectorAsSelector`: `matchLabels` become `key=value`
//! requirements, `matchExpressions` use the operators In, NotIn, Exists and DoesNotExist,
//! keys must be qualified names and values label values. An empty selector selects
//! everything (its string is empty). Requirements print sorted by key, values sorted, so
//! the string is deterministic.
//!
//! kube's `Selector` is used where it covers the use: matching a cache's labels
//! (`watch.rs`) and list or watch calls (`imagepulljob`, the daemon's CRR watch). It does
//! not cover the planner's: it checks neither key nor value syntax (an invalid CloneSet
//! selector must be reported, not taken), prints requirements in the order written (the
//! status string must be sorted by key like Kubernetes'), and exposes no requirement by
//! itself (the update order matches per requirement, and errors name the first one
//! unmet).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{0:?} is not a valid label selector operator")]
    Operator(String),
    #[error("invalid label key {key:?}: {reason}")]
    Key { key: String, reason: &'static str },
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    Value {
        key: String,
        value: String,
        reason: &'static str,
    },
    #[error("operator {operator} of key {key:?} {reason}")]
    Values {
        key: String,
        operator: &'static str,
        reason: &'static str,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    Equals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Operator {
    fn name(self) -> &'static str {
        match self {
            Self::Equals => "=",
            Self::In => "In",
            Self::NotIn => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
        }
    }
}

/// One `key op values` term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and deduplicated.
    values: Vec<String>,
}

impl Requirement {
    fn new(key: &str, operator: Operator, values: &[String]) -> Result<Self, SelectorError> {
        validate_key(key)?;
        let mut values: Vec<String> = values.to_vec();
        values.sort();
        values.dedup();
        let count_error = |reason| SelectorError::Values {
            key: key.to_owned(),
            operator: operator.name(),
            reason,
        };
        match operator {
            Operator::Equals if values.len() != 1 => return Err(count_error("needs one value")),
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(count_error("needs at least one value"));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(count_error("takes no values"));
            }
            _ => {}
        }
        for value in &values {
            validate_value(key, value)?;
        }
        Ok(Self {
            key: key.to_owned(),
            operator,
            values,
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_value(labels.get(&self.key).map(String::as_str))
    }

    /// The label key this requirement reads.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether a pod whose label [`Self::key`] has `value` (None: no such label)
    /// satisfies the requirement.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        // A few values (the usual case) are compared for equality, which checks the
        // lengths first and most often reads no text; more are searched in their order.
        let listed = |v: &str| {
            if self.values.len() <= 4 {
                self.values.iter().any(|listed| listed == v)
            } else {
                self.values
                    .binary_search_by(|listed| listed.as_str().cmp(v))
                    .is_ok()
            }
        };
        match self.operator {
            Operator::Equals | Operator::In => value.is_some_and(listed),
            Operator::NotIn => !value.is_some_and(listed),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator {
            Operator::Equals => write!(f, "{}={}", self.key, self.values.join(",")),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A parsed, validated label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// Sorted by key (stable), as Kubernetes prints them.
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Parses `selector` like Kubernetes' `LabelSelectorAsSelector`.
    pub fn parse(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::new(
                key,
                Operator::Equals,
                std::slice::from_ref(value),
            )?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(SelectorError::Operator(other.to_owned())),
            };
            let values = expr.values.as_deref().unwrap_or(&[]);
            requirements.push(Requirement::new(&expr.key, operator, values)?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// True when the selector has no requirement (selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// [`Self::matches`] for labels read through `get` (the value of a key, if any).
    pub fn matches_with<'l>(&self, get: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(get(r.key())))
    }

    /// The first requirement that `labels` do not satisfy, printed (for error messages).
    pub fn first_mismatch(&self, labels: &BTreeMap<String, String>) -> Option<String> {
        self.requirements
            .iter()
            .find(|r| !r.matches(labels))
            .map(ToString::to_string)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, the shape of label names and values.
fn is_label_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: lowercase labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?` joined by dots.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|part| {
            let bytes = part.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    (first.is_ascii_lowercase() || first.is_ascii_digit())
                        && (last.is_ascii_lowercase() || last.is_ascii_digit())
                        && bytes
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                }
                _ => false,
            }
        })
}

fn validate_key(key: &str) -> Result<(), SelectorError> {
    let err = |reason| SelectorError::Key {
        key: key.to_owned(),
        reason,
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(err("the prefix must be a DNS subdomain"));
    }
    if name.is_empty() || name.len() > 63 {
        return Err(err("the name must be 1 to 63 characters"));
    }
    if !is_label_token(name) {
        return Err(err(
            "the name must be alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
        ));
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    let err = |reason| SelectorError::Value {
        key: key.to_owned(),
        value: value.to_owned(),
        reason,
    };
    if value.len() > 63 {
        return Err(err("at most 63 characters"));
    }
    if !value.is_empty() && !is_label_token(value) {
        return Err(err(
            "alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn in_and_not_in_with_few_and_many_values() {
        // Up to four values are scanned, more are searched: the same answers.
        let few = ["b", "a", "ccc", "dd"];
        let many = ["b", "a", "ccc", "dd", "e", "ff", "g"];
        for values in [&few[..], &many[..]] {
            let owned: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
            let is_in = Requirement::new("k", Operator::In, &owned).unwrap();
            let not_in = Requirement::new("k", Operator::NotIn, &owned).unwrap();
            for v in values {
                assert!(is_in.matches_value(Some(v)), "{v} in {values:?}");
                assert!(!not_in.matches_value(Some(v)), "{v} notin {values:?}");
            }
            for v in ["", "c", "cc", "d", "ddd", "h"] {
                assert!(!is_in.matches_value(Some(v)), "{v} in {values:?}");
                assert!(not_in.matches_value(Some(v)), "{v} notin {values:?}");
            }
            assert!(!is_in.matches_value(None));
            assert!(not_in.matches_value(None));
        }
    }

    #[test]
    fn match_labels_and_expressions_print_sorted_by_key_like_kubernetes() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "sample"), ("tier", "web")])),
            match_expressions: Some(vec![
                expr("env", "In", &["prod", "dev"]),
                expr("zone", "NotIn", &["b"]),
                expr("canary", "DoesNotExist", &[]),
                expr("beta", "Exists", &[]),
            ]),
        };
        let s = Selector::parse(&sel).unwrap();
        assert_eq!(
            s.to_string(),
            "app=sample,beta,!canary,env in (dev,prod),tier=web,zone notin (b)"
        );
        assert!(s.matches(&labels(&[
            ("app", "sample"),
            ("tier", "web"),
            ("env", "dev"),
            ("beta", "")
        ])));
        assert!(!s.matches(&labels(&[
            ("app", "sample"),
            ("tier", "web"),
            ("env", "dev")
        ])));
        assert_eq!(
            s.first_mismatch(&labels(&[("app", "other")])).as_deref(),
            Some("app=sample")
        );
    }

    #[test]
    fn empty_selector_selects_everything() {
        let s = Selector::parse(&LabelSelector::default()).unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&labels(&[("x", "y")])));
        assert_eq!(s.to_string(), "");
    }

    #[test]
    fn invalid_operator_key_value_and_value_counts_are_rejected() {
        let bad = |e: LabelSelectorRequirement| {
            Selector::parse(&LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![e]),
            })
        };
        assert!(matches!(
            bad(expr("a", "Gt", &["1"])),
            Err(SelectorError::Operator(_))
        ));
        assert!(matches!(
            bad(expr("a", "In", &[])),
            Err(SelectorError::Values { .. })
        ));
        assert!(matches!(
            bad(expr("a", "Exists", &["x"])),
            Err(SelectorError::Values { .. })
        ));
        assert!(matches!(
            bad(expr("-a", "Exists", &[])),
            Err(SelectorError::Key { .. })
        ));
        assert!(matches!(
            bad(expr("Bad_Prefix/a", "Exists", &[])),
            Err(SelectorError::Key { .. })
        ));
        assert!(matches!(
            bad(expr("a", "In", &["bad value"])),
            Err(SelectorError::Value { .. })
        ));
        assert!(bad(expr("apps.kruise.io/x", "In", &["", "v1.2"])).is_ok());
    }
}
