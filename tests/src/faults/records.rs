//! Invariants computed from the proxy's record of requests ([`super::proxy::Record`]),
//! not from the watches: what the controller (or the daemon) *wrote*, whether the API
//! server applied it, and when.
//!
//! A write is *applied* when the proxy forwarded it and the API server answered 2xx
//! ([`Record::upstream`]), whatever the client got (a `500` or a cut connection after
//! commit still applied it). Times are the proxy's clock: [`Record::at_ms`] when the
//! request arrived, [`Record::done_ms`] when its answer was decided; a write was applied
//! between the two.
//!
//! Invariants:
//! 1. **Nothing from a killed process** ([`after_kills`]): no request arrives on a
//!    connection opened before a kill later than [`KILL_SLACK_MS`] after the kill (the
//!    killed process's connections; the slack covers bytes already in the proxy's socket
//!    buffer when the runner reaped the process). Writes of a killed process that arrived
//!    before its kill and were applied after it (the proxy's latency held them) are
//!    counted, not violations: a real network delivers those too.
//! 2. **Every pod deletion accounted for** ([`PodLedger`]): pods are created and deleted
//!    only by the controller here, so once the CloneSet converged on `target` pods, the
//!    distinct pods it deleted or evicted = the pods it created − `target`: each deletion
//!    is of a pod scaled down or of an extra (surge, or created twice) pod, none of a pod
//!    that had to stay. An in-place rollout without surge creates and deletes none.
//! 3. **Pods within replicas + maxSurge by the controller's own writes**: counting each
//!    create from when it was sent and each delete from when it was answered (an upper
//!    bound of the pods live at any moment), never more than the bound.
//! 4. **No PVC deleted before its pod** ([`pvc_deletes`]): an applied PVC `DELETE` of a
//!    claim of pod P (P created in the run) comes after an applied `DELETE` or eviction of
//!    P was answered.
//! 5. **The daemon writes pods only through `pods/status`, pinned** ([`daemon_pod_writes`]):
//!    every daemon write to a pod is a `PATCH`/`PUT` of the `status` subresource whose body
//!    carries `metadata.resourceVersion` (issue 12: no unpinned status write; the daemon
//!    has no `pods: patch`).

use std::collections::{BTreeMap, BTreeSet};

use super::proxy::Record;

/// See invariant 1.
pub const KILL_SLACK_MS: u64 = 100;

/// The object a request's path names: `/api/v1/namespaces/NS/pods/NAME/status` →
/// resource `pods`, name `NAME`, subresource `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    pub resource: &'a str,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
}

impl<'a> Target<'a> {
    pub fn of(path: &'a str) -> Option<Target<'a>> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        // Skip the group-version prefix: `api/v1` or `apis/GROUP/VERSION`.
        let rest = match *parts.first()? {
            "api" => parts.get(2..)?,
            "apis" => parts.get(3..)?,
            _ => return None,
        };
        let rest = match rest {
            ["namespaces", _ns, r @ ..] if !r.is_empty() => r,
            r => r,
        };
        let (resource, tail) = rest.split_first()?;
        Some(Target {
            resource,
            name: tail.first().copied(),
            subresource: tail.get(1).copied(),
        })
    }
}

fn applied(r: &Record) -> bool {
    r.upstream.is_some_and(|s| (200..300).contains(&s))
}

/// Invariant 1 over the record of one proxy and the kill times (proxy clock, taken once
/// the killed process was reaped). Returns the violations and the number of writes
/// applied after the kill of the process that sent them.
pub fn after_kills(records: &[Record], kills_ms: &[u64]) -> (Vec<String>, u64) {
    let mut violations = Vec::new();
    let mut applied_after = 0;
    for r in records {
        let Some(kill) = kills_ms
            .iter()
            .copied()
            .filter(|k| r.conn_opened_ms <= *k)
            .min()
        else {
            continue;
        };
        if r.at_ms > kill + KILL_SLACK_MS {
            violations.push(format!(
                "{} {} arrived at {} ms on connection {} of a process killed at {kill} ms",
                r.method, r.path, r.at_ms, r.conn
            ));
        } else if r.kind.is_write() && applied(r) && r.done_ms > kill {
            applied_after += 1;
        }
    }
    (violations, applied_after)
}

/// The controller's pod writes in one record (invariants 2 and 3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodLedger {
    /// Pods created (applied), by name.
    pub created: BTreeSet<String>,
    /// Pods deleted or evicted (applied), by name.
    pub deleted: BTreeSet<String>,
    /// The most pods live by the upper-bound count of invariant 3.
    pub peak_live: usize,
}

impl PodLedger {
    pub fn of(records: &[Record]) -> PodLedger {
        // (time, +1 create / -1 delete, name), creates at arrival, deletes when answered.
        let mut events: Vec<(u64, i8, String)> = Vec::new();
        for r in records.iter().filter(|r| applied(r)) {
            let Some(t) = Target::of(&r.path) else {
                continue;
            };
            if t.resource != "pods" {
                continue;
            }
            match (r.method.as_str(), t.name, t.subresource) {
                ("POST", None, None) => {
                    if let Some(name) = &r.body_name {
                        events.push((r.at_ms, 1, name.clone()));
                    }
                }
                ("DELETE", Some(name), None) | ("POST", Some(name), Some("eviction")) => {
                    events.push((r.done_ms, -1, name.to_owned()));
                }
                _ => {}
            }
        }
        // At equal times a create counts first (the upper bound).
        events.sort_by_key(|(t, d, _)| (*t, std::cmp::Reverse(*d)));
        let mut ledger = PodLedger::default();
        let mut live: BTreeSet<String> = BTreeSet::new();
        for (_, d, name) in events {
            if d > 0 {
                ledger.created.insert(name.clone());
                live.insert(name);
            } else {
                ledger.deleted.insert(name.clone());
                live.remove(&name);
            }
            ledger.peak_live = ledger.peak_live.max(live.len());
        }
        ledger
    }

    /// Invariants 2 (when the run converged on `target` pods) and 3.
    pub fn violations(&self, target: usize, max_pods: usize, converged: bool) -> Vec<String> {
        let mut out = Vec::new();
        if self.peak_live > max_pods {
            out.push(format!(
                "the controller's writes had up to {} pods live > replicas + maxSurge = {max_pods}",
                self.peak_live
            ));
        }
        let unknown: Vec<&String> = self.deleted.difference(&self.created).collect();
        if !unknown.is_empty() {
            out.push(format!("deleted pods never created: {unknown:?}"));
        }
        if converged && self.deleted.len() + target != self.created.len() {
            out.push(format!(
                "{} pods deleted, but {} created for {target} kept: {} deletion(s) unaccounted for",
                self.deleted.len(),
                self.created.len(),
                self.deleted.len() as i64 - (self.created.len() as i64 - target as i64)
            ));
        }
        out
    }
}

/// Invariant 4: `pod_of_claim` names the pod a PVC belongs to.
pub fn pvc_deletes(
    records: &[Record],
    pod_of_claim: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut created: BTreeSet<String> = BTreeSet::new();
    let mut pod_gone_ms: BTreeMap<String, u64> = BTreeMap::new();
    let mut pvc_deletes: Vec<(u64, String)> = Vec::new();
    for r in records.iter().filter(|r| applied(r)) {
        let Some(t) = Target::of(&r.path) else {
            continue;
        };
        match (t.resource, r.method.as_str(), t.name, t.subresource) {
            ("pods", "POST", None, None) => created.extend(r.body_name.clone()),
            ("pods", "DELETE", Some(name), None)
            | ("pods", "POST", Some(name), Some("eviction")) => {
                let at = pod_gone_ms.entry(name.to_owned()).or_insert(r.done_ms);
                *at = (*at).min(r.done_ms);
            }
            ("persistentvolumeclaims", "DELETE", Some(name), None) => {
                pvc_deletes.push((r.at_ms, name.to_owned()));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (at, claim) in pvc_deletes {
        let Some(pod) = pod_of_claim(&claim).filter(|p| created.contains(p)) else {
            continue;
        };
        match pod_gone_ms.get(&pod) {
            Some(gone) if *gone <= at => {}
            Some(gone) => out.push(format!(
                "PVC {claim} deleted (sent at {at} ms) before the deletion of its pod {pod} was answered ({gone} ms)"
            )),
            None => out.push(format!(
                "PVC {claim} deleted (sent at {at} ms) and its pod {pod} never deleted"
            )),
        }
    }
    out
}

/// Invariant 5 over the daemon's proxy record.
pub fn daemon_pod_writes(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.kind.is_write())
        .filter_map(|r| {
            let t = Target::of(&r.path)?;
            if t.resource != "pods" {
                return None;
            }
            let status_write =
                matches!(r.method.as_str(), "PATCH" | "PUT") && t.subresource == Some("status");
            if !status_write {
                Some(format!("the daemon wrote {} {}", r.method, r.path))
            } else if !r.precondition {
                Some(format!(
                    "the daemon's {} {} carries no resourceVersion",
                    r.method, r.path
                ))
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::injection::RequestKind;
    use super::*;

    const PODS: &str = "/api/v1/namespaces/ns/pods";

    fn rec(method: &str, path: &str, at: u64, done: u64, upstream: Option<u16>) -> Record {
        Record {
            at_ms: at,
            done_ms: done,
            conn: 1,
            conn_opened_ms: 0,
            method: method.into(),
            path: path.into(),
            kind: RequestKind::of(method, None),
            status: upstream.unwrap_or(500),
            upstream,
            fault: None,
            delay_ms: 0,
            body_name: None,
            precondition: false,
        }
    }

    fn create(name: &str, at: u64) -> Record {
        Record {
            body_name: Some(name.into()),
            ..rec("POST", PODS, at, at + 5, Some(201))
        }
    }

    fn delete(name: &str, at: u64) -> Record {
        rec("DELETE", &format!("{PODS}/{name}"), at, at + 5, Some(200))
    }

    #[test]
    fn targets_of_paths() {
        assert_eq!(
            Target::of("/api/v1/namespaces/ns/pods/p-1/status"),
            Some(Target {
                resource: "pods",
                name: Some("p-1"),
                subresource: Some("status")
            })
        );
        assert_eq!(
            Target::of(PODS),
            Some(Target {
                resource: "pods",
                name: None,
                subresource: None
            })
        );
        assert_eq!(
            Target::of("/apis/apps.kruise.io/v1alpha1/nodeimages/n0/status"),
            Some(Target {
                resource: "nodeimages",
                name: Some("n0"),
                subresource: Some("status")
            })
        );
        assert_eq!(
            Target::of("/api/v1/namespaces/ns").map(|t| (t.resource, t.name)),
            Some(("namespaces", Some("ns")))
        );
        assert_eq!(Target::of("/version"), None);
    }

    #[test]
    fn requests_after_a_kill_on_the_killed_process_connections() {
        let old = |at, done| Record {
            conn: 1,
            conn_opened_ms: 10,
            ..rec("PATCH", &format!("{PODS}/a"), at, done, Some(200))
        };
        let new = Record {
            conn: 2,
            conn_opened_ms: 1500,
            ..rec("PATCH", &format!("{PODS}/a"), 1600, 1610, Some(200))
        };
        // Before the kill; arrived before and applied after (counted); a new process.
        let (v, after) = after_kills(&[old(500, 510), old(990, 1300), new.clone()], &[1000]);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(after, 1);
        // Within the slack: bytes already sent.
        assert!(
            after_kills(&[old(1000 + KILL_SLACK_MS, 1200)], &[1000])
                .0
                .is_empty()
        );
        // Past it: the killed process is still talking.
        let (v, _) = after_kills(&[old(1400, 1410)], &[1000]);
        assert_eq!(v.len(), 1);
        assert!(v[0].contains("killed at 1000 ms"), "{v:?}");
        // A connection of the new process after a second kill.
        let (v, _) = after_kills(&[Record { at_ms: 1700, ..new }], &[1000, 1550]);
        assert!(v[0].contains("killed at 1550 ms"), "{v:?}");
    }

    #[test]
    fn a_scale_down_deletes_exactly_the_extra_pods() {
        let mut rs: Vec<Record> = ["a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, n)| create(n, i as u64))
            .collect();
        rs.push(delete("c", 100));
        // Deleted twice (the first answer lost): one pod.
        rs.push(Record {
            upstream: Some(200),
            status: 0,
            ..delete("d", 110)
        });
        rs.push(delete("d", 120));
        // Not applied: no deletion.
        rs.push(Record {
            upstream: None,
            ..delete("a", 130)
        });
        let l = PodLedger::of(&rs);
        assert_eq!(l.created.len(), 4);
        assert_eq!(l.deleted.len(), 2);
        assert_eq!(l.peak_live, 4);
        assert!(l.violations(2, 4, true).is_empty());
        let v = l.violations(3, 4, true);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("1 deletion(s) unaccounted for"), "{v:?}");
        // Not converged: the count is not judged.
        assert!(l.violations(3, 4, false).is_empty());
        assert_eq!(l.violations(2, 3, true).len(), 1, "4 live > 3");
    }

    #[test]
    fn a_create_sent_before_a_delete_was_answered_counts_both() {
        // Surge: the new pod is created while the old one's deletion is not answered yet.
        let rs = vec![
            create("a", 0),
            create("b", 1),
            rec("DELETE", &format!("{PODS}/a"), 100, 200, Some(200)),
            create("c", 150),
            rec("POST", &format!("{PODS}/b/eviction"), 300, 310, Some(201)),
        ];
        let l = PodLedger::of(&rs);
        assert_eq!(l.peak_live, 3);
        assert_eq!(l.deleted, BTreeSet::from(["a".into(), "b".into()]));
        assert!(l.violations(1, 3, true).is_empty());
        assert_eq!(l.violations(1, 2, true).len(), 1);
        let stray = PodLedger::of(&[delete("zz", 5)]);
        assert_eq!(stray.violations(0, 3, false).len(), 1);
    }

    #[test]
    fn pvc_deleted_only_after_its_pod() {
        let pvc = |name: &str, at| {
            rec(
                "DELETE",
                &format!("/api/v1/namespaces/ns/persistentvolumeclaims/{name}"),
                at,
                at + 5,
                Some(200),
            )
        };
        let of = |c: &str| c.strip_prefix("data-").map(str::to_owned);
        // After the pod's deletion was answered; of a pod never created (an orphan).
        let ok = vec![
            create("a", 0),
            delete("a", 100),
            pvc("data-a", 105),
            pvc("data-x", 106),
        ];
        assert!(pvc_deletes(&ok, of).is_empty());
        // Sent before the answer; its pod never deleted; not applied: not judged.
        let bad = vec![
            create("a", 0),
            create("b", 1),
            delete("a", 100),
            pvc("data-a", 102),
            pvc("data-b", 200),
            Record {
                upstream: Some(404),
                ..pvc("data-b", 300)
            },
        ];
        let v = pvc_deletes(&bad, of);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("before the deletion of its pod a was answered (105 ms)"));
        assert!(v[1].contains("its pod b never deleted"));
    }

    #[test]
    fn daemon_writes_pods_only_through_status_and_pinned() {
        let status = |pinned| Record {
            precondition: pinned,
            ..rec("PATCH", &format!("{PODS}/a/status"), 0, 1, Some(200))
        };
        let rs = vec![
            status(true),
            rec("GET", &format!("{PODS}/a"), 0, 1, Some(200)),
            rec(
                "PATCH",
                "/apis/apps.kruise.io/v1alpha1/nodeimages/n/status",
                0,
                1,
                Some(200),
            ),
            rec("POST", "/api/v1/namespaces/ns/events", 0, 1, Some(201)),
        ];
        assert!(daemon_pod_writes(&rs).is_empty());
        let v = daemon_pod_writes(&[
            status(false),
            rec("PATCH", &format!("{PODS}/a"), 0, 1, Some(200)),
            rec("DELETE", &format!("{PODS}/a"), 0, 1, Some(200)),
        ]);
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].contains("carries no resourceVersion"));
    }
}
