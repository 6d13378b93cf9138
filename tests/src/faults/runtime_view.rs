//! The node suite's invariants from containerd's own view: the containers CRI lists
//! (every state), read on containerd's socket directly, never through the fault proxy.
//!
//! The kubelet gives each new container of a pod's container name the next *attempt*
//! number (its restart count), and the suite's test image does not crash, so the attempts
//! count the restarts: after an in-place update a pod's container runs as attempt
//! baseline + 1, created after the change was made, and no container of that name has a
//! higher attempt (restarted once: never twice, never not at all). A pod outside the update
//! keeps its running container (same id, same attempt) and gets no new one.

use std::collections::BTreeMap;

/// One container as CRI lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriContainer {
    pub id: String,
    /// The `io.kubernetes.pod.uid` label.
    pub pod_uid: String,
    pub pod_name: String,
    /// The container's name in the pod.
    pub name: String,
    pub attempt: u32,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    pub running: bool,
}

/// The running container `name` of pod `uid` (the highest attempt if several).
fn running<'a>(view: &'a [CriContainer], uid: &str, name: &str) -> Option<&'a CriContainer> {
    view.iter()
        .filter(|c| c.pod_uid == uid && c.name == name && c.running)
        .max_by_key(|c| c.attempt)
}

/// What each pod's container should have gone through between two views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Updated in place: restarted exactly once.
    RestartedOnce,
    /// Outside the update: untouched.
    Untouched,
}

/// The violations between the view `before` the change and the view `after` convergence,
/// for container `name` of the pods in `pods` (uid → what is expected). `changed_at` is
/// when the change was made (ns since the epoch).
pub fn check(
    before: &[CriContainer],
    after: &[CriContainer],
    pods: &BTreeMap<String, Expect>,
    name: &str,
    changed_at: i64,
) -> Vec<String> {
    let mut out = Vec::new();
    for (uid, expect) in pods {
        let Some(b) = running(before, uid, name) else {
            out.push(format!(
                "pod {uid}: no running container {name} in containerd before the change"
            ));
            continue;
        };
        let pod = &b.pod_name;
        let Some(a) = running(after, uid, name) else {
            out.push(format!(
                "pod {pod}: no running container {name} in containerd after convergence"
            ));
            continue;
        };
        let highest = after
            .iter()
            .filter(|c| c.pod_uid == *uid && c.name == name)
            .map(|c| c.attempt)
            .max()
            .unwrap_or(a.attempt);
        match expect {
            Expect::RestartedOnce => {
                if a.attempt == b.attempt || a.id == b.id {
                    out.push(format!(
                        "pod {pod}: container {name} not restarted by the update \
                         (still {} attempt {})",
                        short(&a.id),
                        a.attempt
                    ));
                } else if highest > b.attempt + 1 || a.attempt != b.attempt + 1 {
                    out.push(format!(
                        "pod {pod}: container {name} restarted {} times by one update \
                         (attempt {} before, {} after)",
                        highest.max(a.attempt) - b.attempt,
                        b.attempt,
                        highest.max(a.attempt)
                    ));
                } else if a.created_at < changed_at {
                    out.push(format!(
                        "pod {pod}: container {name} {} was created before the change",
                        short(&a.id)
                    ));
                }
            }
            Expect::Untouched => {
                if a.id != b.id || highest != b.attempt {
                    out.push(format!(
                        "pod {pod} (outside the update): container {name} touched \
                         ({} attempt {} before, {} attempt {} after)",
                        short(&b.id),
                        b.attempt,
                        short(&a.id),
                        highest
                    ));
                }
            }
        }
    }
    out
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, uid: &str, attempt: u32, created_at: i64, running: bool) -> CriContainer {
        CriContainer {
            id: id.into(),
            pod_uid: uid.into(),
            pod_name: format!("pod-{uid}"),
            name: "app".into(),
            attempt,
            created_at,
            running,
        }
    }

    fn pods(e: &[(&str, Expect)]) -> BTreeMap<String, Expect> {
        e.iter().map(|(u, x)| ((*u).to_owned(), *x)).collect()
    }

    const CHANGED: i64 = 1_000;

    #[test]
    fn an_update_that_restarts_each_container_once_passes() {
        let before = [c("a0", "u1", 0, 10, true), c("b3", "u2", 3, 10, true)];
        let after = [
            c("a0", "u1", 0, 10, false),
            c("a1", "u1", 1, 2_000, true),
            c("b3", "u2", 3, 10, true),
        ];
        let p = pods(&[("u1", Expect::RestartedOnce), ("u2", Expect::Untouched)]);
        assert_eq!(
            check(&before, &after, &p, "app", CHANGED),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_container_restarted_twice_is_reported() {
        let before = [c("a0", "u1", 0, 10, true)];
        // The first new container exited and was replaced: attempt 2 runs.
        let after = [
            c("a1", "u1", 1, 2_000, false),
            c("a2", "u1", 2, 3_000, true),
        ];
        let v = check(
            &before,
            &after,
            &pods(&[("u1", Expect::RestartedOnce)]),
            "app",
            CHANGED,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("restarted 2 times"), "{v:?}");
    }

    #[test]
    fn a_second_restart_seen_only_as_an_exited_container_is_reported() {
        let before = [c("a0", "u1", 0, 10, true)];
        // Attempt 1 runs while attempt 2 exited: two containers were made for one update.
        let after = [
            c("a1", "u1", 1, 2_000, true),
            c("a2", "u1", 2, 3_000, false),
        ];
        let v = check(
            &before,
            &after,
            &pods(&[("u1", Expect::RestartedOnce)]),
            "app",
            CHANGED,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("restarted 2 times"), "{v:?}");
    }

    #[test]
    fn a_container_not_restarted_is_reported() {
        let before = [c("a0", "u1", 0, 10, true)];
        let after = [c("a0", "u1", 0, 10, true)];
        let v = check(
            &before,
            &after,
            &pods(&[("u1", Expect::RestartedOnce)]),
            "app",
            CHANGED,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("not restarted"), "{v:?}");
    }

    #[test]
    fn a_new_container_from_before_the_change_is_reported() {
        let before = [c("a0", "u1", 0, 10, true)];
        let after = [c("a1", "u1", 1, 500, true)];
        let v = check(
            &before,
            &after,
            &pods(&[("u1", Expect::RestartedOnce)]),
            "app",
            CHANGED,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("created before the change"), "{v:?}");
    }

    #[test]
    fn a_pod_outside_the_update_restarted_is_reported() {
        let before = [c("b0", "u2", 0, 10, true)];
        let after = [c("b0", "u2", 0, 10, false), c("b1", "u2", 1, 2_000, true)];
        let v = check(
            &before,
            &after,
            &pods(&[("u2", Expect::Untouched)]),
            "app",
            CHANGED,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("outside the update"), "{v:?}");
    }

    #[test]
    fn a_pod_gone_from_containerd_is_reported() {
        let before = [c("a0", "u1", 0, 10, true)];
        let v = check(
            &before,
            &[],
            &pods(&[("u1", Expect::RestartedOnce)]),
            "app",
            CHANGED,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("after convergence"), "{v:?}");
    }
}
