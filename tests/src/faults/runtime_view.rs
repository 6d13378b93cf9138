//! The node suite's invariants from containerd's own view: the containers CRI lists
//! (every state), read on containerd's socket directly, never through the fault proxy,
//! each with the time its task started (CRI `ContainerStatus`).
//!
//! The kubelet gives each new container of a pod's container name the next *attempt*
//! number, and the suite's test image does not crash, so the containers of higher attempts
//! that *ran* count the restarts: after an in-place update a pod's container runs as a
//! newer attempt, created after the change was made, and it is the only newer one that
//! ever started (restarted once: never twice, never not at all). A newer container that
//! was created but never started is not a restart: containerd restarted under the
//! kubelet's `StartContainer`, and the kubelet made another. A pod outside the update
//! keeps its running container (same id, same attempt) and gets no new one. A pod whose
//! update cannot succeed (its new image is not in the registry) has its container from
//! before stopped by the kubelet, to run the new image, and no new one: the pull fails
//! before any is created.

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
    /// When its task started, in nanoseconds since the epoch; 0: it never started.
    pub started_at: i64,
    pub running: bool,
}

impl CriContainer {
    fn ran(&self) -> bool {
        self.started_at > 0
    }
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
    /// In an update that cannot succeed: the container from before stopped, none created.
    StoppedNotReplaced,
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
        if *expect == Expect::StoppedNotReplaced {
            out.extend(stopped_not_replaced(b, after, name));
            continue;
        }
        let Some(a) = running(after, uid, name) else {
            out.push(format!(
                "pod {pod}: no running container {name} in containerd after convergence"
            ));
            continue;
        };
        match expect {
            Expect::RestartedOnce => {
                let ran: Vec<&CriContainer> = after
                    .iter()
                    .filter(|c| c.pod_uid == *uid && c.name == name)
                    .filter(|c| c.attempt > b.attempt && c.ran())
                    .collect();
                if a.id == b.id || a.attempt <= b.attempt {
                    out.push(format!(
                        "pod {pod}: container {name} not restarted by the update \
                         (still {} attempt {})",
                        short(&a.id),
                        a.attempt
                    ));
                } else if ran.len() > 1 {
                    let attempts: Vec<String> = ran.iter().map(|c| c.attempt.to_string()).collect();
                    out.push(format!(
                        "pod {pod}: container {name} restarted {} times by one update \
                         (attempt {} before; attempts {} ran after)",
                        ran.len(),
                        b.attempt,
                        attempts.join(", ")
                    ));
                } else if a.created_at < changed_at {
                    out.push(format!(
                        "pod {pod}: container {name} {} was created before the change",
                        short(&a.id)
                    ));
                }
            }
            Expect::StoppedNotReplaced => {}
            Expect::Untouched => {
                let highest = after
                    .iter()
                    .filter(|c| c.pod_uid == *uid && c.name == name)
                    .map(|c| c.attempt)
                    .max()
                    .unwrap_or(a.attempt);
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

/// The completions seen before the pod's status named the new container
/// ([`super::inplace::InPlaceChecker::runtime_claims`]), against containerd's views before
/// the change and after convergence: each pod's container `name` must have a container
/// newer than the one from before (a higher attempt) whose task started before the
/// completion was seen. The daemon completes an image update once the runtime runs the new
/// container; a completion before that would let the pod count as updated while the old
/// one still runs.
pub fn check_claims(
    before: &[CriContainer],
    after: &[CriContainer],
    claims: &[super::inplace::RuntimeClaim],
    name: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for claim in claims {
        let marked = format!(
            "pod {} marked InPlaceUpdateReady=True on revision {} (rv {})",
            claim.name, claim.revision, claim.rv
        );
        let Some(b) = running(before, &claim.uid, name) else {
            out.push(format!(
                "{marked}: no running container {name} in containerd before the change"
            ));
            continue;
        };
        let first_ran = after
            .iter()
            .filter(|c| c.pod_uid == claim.uid && c.name == name && c.attempt > b.attempt)
            .filter(|c| c.ran())
            .min_by_key(|c| c.attempt);
        match first_ran {
            None => out.push(format!(
                "{marked} but containerd has no container {name} newer than {} (attempt {}) \
                 that ever started",
                short(&b.id),
                b.attempt
            )),
            Some(n) if n.started_at > claim.seen_ns => out.push(format!(
                "{marked} {} ms before containerd started its new container {name} {}",
                (n.started_at - claim.seen_ns) / 1_000_000,
                short(&n.id)
            )),
            Some(_) => {}
        }
    }
    out
}

/// [`Expect::StoppedNotReplaced`] for the container `b` ran before the change.
fn stopped_not_replaced(b: &CriContainer, after: &[CriContainer], name: &str) -> Vec<String> {
    let pod = &b.pod_name;
    let mut out = Vec::new();
    if after.iter().any(|c| c.id == b.id && c.running) {
        out.push(format!(
            "pod {pod}: container {name} {} still runs though its update replaced its image",
            short(&b.id)
        ));
    }
    let made: Vec<String> = after
        .iter()
        .filter(|c| c.pod_uid == b.pod_uid && c.name == name && c.attempt > b.attempt)
        .map(|c| format!("{} attempt {}", short(&c.id), c.attempt))
        .collect();
    if !made.is_empty() {
        out.push(format!(
            "pod {pod}: container {name} created again ({}) though its new image does not exist",
            made.join(", ")
        ));
    }
    out
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container that started 1 ns after it was created.
    fn c(id: &str, uid: &str, attempt: u32, created_at: i64, running: bool) -> CriContainer {
        CriContainer {
            id: id.into(),
            pod_uid: uid.into(),
            pod_name: format!("pod-{uid}"),
            name: "app".into(),
            attempt,
            created_at,
            started_at: created_at + 1,
            running,
        }
    }

    /// A container created and never started (the kubelet's start was cut short).
    fn never_started(id: &str, uid: &str, attempt: u32, created_at: i64) -> CriContainer {
        CriContainer {
            started_at: 0,
            ..c(id, uid, attempt, created_at, false)
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

    /// Seed 1112: containerd restarted while the kubelet was starting attempt 1, whose
    /// task never started; the kubelet made attempt 2. One container ran: one restart.
    #[test]
    fn a_new_container_that_never_started_is_not_a_restart() {
        let before = [c("a0", "u1", 0, 10, true)];
        let after = [
            c("a0", "u1", 0, 10, false),
            never_started("a1", "u1", 1, 2_000),
            c("a2", "u1", 2, 3_000, true),
        ];
        let p = pods(&[("u1", Expect::RestartedOnce)]);
        assert_eq!(
            check(&before, &after, &p, "app", CHANGED),
            Vec::<String>::new()
        );
        // The same attempts, both started: two restarts.
        let twice = [
            c("a0", "u1", 0, 10, false),
            c("a1", "u1", 1, 2_000, false),
            c("a2", "u1", 2, 3_000, true),
        ];
        let v = check(&before, &twice, &p, "app", CHANGED);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains(
                "restarted 2 times by one update (attempt 0 before; attempts 1, 2 ran after)"
            ),
            "{v:?}"
        );
    }

    /// A pod outside the update given a container that never started was still touched:
    /// something stopped its container or made the kubelet create another.
    #[test]
    fn a_pod_outside_the_update_given_a_container_that_never_started_is_reported() {
        let before = [c("b0", "u2", 0, 10, true)];
        let after = [
            c("b0", "u2", 0, 10, true),
            never_started("b1", "u2", 1, 2_000),
        ];
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
    fn an_update_that_cannot_succeed_stops_the_container_and_makes_none() {
        let before = [c("a0", "u1", 0, 10, true), c("b0", "u2", 0, 10, true)];
        let p = pods(&[
            ("u1", Expect::StoppedNotReplaced),
            ("u2", Expect::Untouched),
        ]);
        // As the kubelet leaves it: the old container exited, the pull failed.
        let after = [c("a0", "u1", 0, 10, false), c("b0", "u2", 0, 10, true)];
        assert_eq!(
            check(&before, &after, &p, "app", CHANGED),
            Vec::<String>::new()
        );
        // Never stopped.
        let v = check(&before, &before, &p, "app", CHANGED);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("still runs though its update replaced its image"),
            "{v:?}"
        );
        // A container created anyway (a daemon that restarted it from the old image).
        let after = [
            c("a0", "u1", 0, 10, false),
            c("a1", "u1", 1, 2_000, true),
            c("b0", "u2", 0, 10, true),
        ];
        let v = check(&before, &after, &p, "app", CHANGED);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("created again (a1 attempt 1)"), "{v:?}");
    }

    /// A ContainerRecreateRequest run twice (a daemon that, restarted after a kill, took
    /// up a request it had already carried out): containerd shows two new attempts of
    /// the target's container, the request's status only "Succeeded".
    #[test]
    fn a_recreate_request_run_twice_is_reported() {
        let before = [c("a0", "u1", 0, 10, true), c("b0", "u2", 0, 10, true)];
        let after = [
            c("a0", "u1", 0, 10, false),
            c("a1", "u1", 1, 2_000, false),
            c("a2", "u1", 2, 4_000, true),
            c("b0", "u2", 0, 10, true),
        ];
        let p = pods(&[("u1", Expect::RestartedOnce), ("u2", Expect::Untouched)]);
        let v = check(&before, &after, &p, "app", CHANGED);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("pod pod-u1: container app restarted 2 times"),
            "{v:?}"
        );
        // Run once: passes.
        let once = [
            c("a0", "u1", 0, 10, false),
            c("a1", "u1", 1, 2_000, true),
            c("b0", "u2", 0, 10, true),
        ];
        assert_eq!(
            check(&before, &once, &p, "app", CHANGED),
            Vec::<String>::new()
        );
    }

    /// A pod outside the update whose container a daemon stopped (none runs after), or
    /// restarted in a container that exited while the old one still runs.
    #[test]
    fn a_pod_outside_the_update_stopped_or_given_another_container_is_reported() {
        let before = [c("b0", "u2", 0, 10, true)];
        let p = pods(&[("u2", Expect::Untouched)]);
        let v = check(&before, &[c("b0", "u2", 0, 10, false)], &p, "app", CHANGED);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("no running container app"), "{v:?}");
        let after = [c("b0", "u2", 0, 10, true), c("b1", "u2", 1, 2_000, false)];
        let v = check(&before, &after, &p, "app", CHANGED);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("(outside the update): container app touched"),
            "{v:?}"
        );
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

    fn claim(uid: &str, seen_ns: i64) -> crate::faults::inplace::RuntimeClaim {
        crate::faults::inplace::RuntimeClaim {
            uid: uid.into(),
            name: format!("pod-{uid}"),
            revision: "r2".into(),
            rv: 7,
            seen_ns,
        }
    }

    #[test]
    fn a_completion_after_the_new_container_was_created_passes() {
        let before = [c("a0", "u1", 0, 10, true)];
        let after = [c("a0", "u1", 0, 10, false), c("a1", "u1", 1, 2_000, true)];
        assert_eq!(
            check_claims(&before, &after, &[claim("u1", 2_500)], "app"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_completion_before_the_new_container_existed_is_reported() {
        let before = [c("a0", "u1", 0, 10, true), c("b0", "u2", 0, 10, true)];
        // u1: the new container came 2 ms after the completion; u2: none came at all.
        let after = [
            c("a0", "u1", 0, 10, false),
            c("a1", "u1", 1, 3_000_000, true),
            c("b0", "u2", 0, 10, true),
        ];
        let v = check_claims(
            &before,
            &after,
            &[claim("u1", 1_000_000), claim("u2", 1_000_000)],
            "app",
        );
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("pod pod-u1 marked InPlaceUpdateReady=True on revision r2 (rv 7) 2 ms before containerd started its new container app a1"), "{v:?}");
        assert!(v[1].contains("pod pod-u2 marked InPlaceUpdateReady=True on revision r2 (rv 7) but containerd has no container app newer than b0 (attempt 0) that ever started"), "{v:?}");
    }

    /// A completion seen after a new container was created but before any newer one
    /// started: the created one never ran (its start was cut), the next started later.
    #[test]
    fn a_completion_before_any_new_container_started_is_reported() {
        let before = [c("a0", "u1", 0, 10, true)];
        let after = [
            c("a0", "u1", 0, 10, false),
            never_started("a1", "u1", 1, 1_000),
            c("a2", "u1", 2, 5_000_000, true),
        ];
        let v = check_claims(&before, &after, &[claim("u1", 2_000_000)], "app");
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("3 ms before containerd started its new container app a2"),
            "{v:?}"
        );
        // Seen once a2 ran: passes.
        assert_eq!(
            check_claims(&before, &after, &[claim("u1", 6_000_000)], "app"),
            Vec::<String>::new()
        );
    }
}

/// What containerd holds of an image reference (CRI `ImageStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldImage {
    pub id: String,
    pub repo_digests: Vec<String>,
}

/// A NodeImage tag's status as the daemon wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagStatus {
    pub phase: String,
    pub image_id: String,
    pub message: String,
}

/// The violations of a pre-download of `name:tag` once it had time to end: it must have
/// ended (Succeeded, or Failed saying why), and its status must match containerd: a
/// Succeeded tag is held, under the image id the status names (a repo digest of `name`,
/// or `name@<id>`); a Failed one is not held.
pub fn check_pulled(
    name: &str,
    tag: &str,
    status: Option<&TagStatus>,
    held: Option<&HeldImage>,
) -> Vec<String> {
    let image = format!("{name}:{tag}");
    let Some(st) = status else {
        return vec![format!(
            "NodeImage: no status for {image}: the pull never ended"
        )];
    };
    match (st.phase.as_str(), held) {
        ("Succeeded", None) => vec![format!(
            "NodeImage says {image} Succeeded ({}) but containerd does not hold it",
            st.image_id
        )],
        ("Succeeded", Some(h)) => {
            let by_id = format!("{name}@{}", h.id);
            if st.image_id == by_id || h.repo_digests.contains(&st.image_id) {
                Vec::new()
            } else {
                vec![format!(
                    "NodeImage says {image} is {} but containerd holds {} ({})",
                    st.image_id,
                    h.id,
                    h.repo_digests.join(", ")
                )]
            }
        }
        ("Failed", held) => {
            let mut v = Vec::new();
            if st.message.trim().is_empty() {
                v.push(format!("NodeImage says {image} Failed without saying why"));
            }
            if let Some(h) = held {
                v.push(format!(
                    "NodeImage says {image} Failed ({}) but containerd holds it ({})",
                    st.message, h.id
                ));
            }
            v
        }
        (phase, _) => vec![format!(
            "NodeImage: the pull of {image} never ended (still {phase}: {})",
            st.message
        )],
    }
}

#[cfg(test)]
mod pulled_tests {
    use super::*;

    const NAME: &str = "127.0.0.1:5001/inplace-test/app";

    fn st(phase: &str, image_id: &str, message: &str) -> TagStatus {
        TagStatus {
            phase: phase.into(),
            image_id: image_id.into(),
            message: message.into(),
        }
    }

    fn held() -> HeldImage {
        HeldImage {
            id: "sha256:aaa".into(),
            repo_digests: vec![format!("{NAME}@sha256:ddd")],
        }
    }

    #[test]
    fn a_status_that_matches_containerd_passes() {
        let ok = st("Succeeded", &format!("{NAME}@sha256:ddd"), "");
        assert!(check_pulled(NAME, "v3", Some(&ok), Some(&held())).is_empty());
        let by_id = st("Succeeded", &format!("{NAME}@sha256:aaa"), "");
        assert!(check_pulled(NAME, "v3", Some(&by_id), Some(&held())).is_empty());
        let failed = st("Failed", "", "pull cut: unexpected EOF");
        assert!(check_pulled(NAME, "v3", Some(&failed), None).is_empty());
    }

    #[test]
    fn succeeded_but_not_held_is_reported() {
        let s = st("Succeeded", &format!("{NAME}@sha256:ddd"), "");
        let v = check_pulled(NAME, "v3", Some(&s), None);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("does not hold it"), "{v:?}");
    }

    #[test]
    fn succeeded_with_another_image_id_is_reported() {
        let s = st("Succeeded", &format!("{NAME}@sha256:eee"), "");
        let v = check_pulled(NAME, "v3", Some(&s), Some(&held()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("but containerd holds"), "{v:?}");
    }

    #[test]
    fn failed_but_held_or_silent_is_reported() {
        let v = check_pulled(NAME, "v3", Some(&st("Failed", "", "")), Some(&held()));
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("without saying why"), "{v:?}");
        assert!(v[1].contains("but containerd holds it"), "{v:?}");
    }

    #[test]
    fn a_pull_that_never_ended_is_reported() {
        let v = check_pulled(NAME, "v3", Some(&st("Pulling", "", "")), None);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("never ended"), "{v:?}");
        let v = check_pulled(NAME, "v3", None, None);
        assert!(v[0].contains("never ended"), "{v:?}");
    }
}
