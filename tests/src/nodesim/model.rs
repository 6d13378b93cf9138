//! The simulated kubelet's per-pod state machine. Pure: no I/O and no clock; time is
//! passed in as milliseconds since the Unix epoch ([`Ms`]).
//!
//! [`advance`] takes what the pod spec asks for ([`PodView`]), the simulated runtime
//! state ([`PodSim`]) and the time, applies every transition that is due, and says when
//! the next one is due and whether the pod should now be deleted for good.
//! [`super::render`] turns the state into the pod status the kubelet would report.

use super::costs::{self, ShapeCosts};
use super::fault::Faults;

/// Milliseconds since the Unix epoch.
pub type Ms = i64;

/// Delays of the simulated kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// From first sight of the pod to its containers running.
    pub start_delay: Ms,
    /// From a container starting to it being ready.
    pub ready_delay: Ms,
    /// From seeing a changed image to the new container running.
    pub update_delay: Ms,
    /// Upper bound of the wait between seeing a deletion and the final delete.
    pub max_grace: Ms,
    /// How long a crash-looping container runs before it exits.
    pub crash_run: Ms,
    /// First CrashLoopBackOff wait; it doubles with every crash up to `crash_backoff_max`.
    pub crash_backoff: Ms,
    pub crash_backoff_max: Ms,
    /// ErrImagePull turns into ImagePullBackOff after this long.
    pub pull_backoff_after: Ms,
    /// What the pod's shape costs beyond these delays ([`costs`]; nothing by default).
    pub shape: ShapeCosts,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            start_delay: 200,
            ready_delay: 500,
            update_delay: 1_000,
            max_grace: 2_000,
            crash_run: 1_000,
            crash_backoff: 10_000,
            crash_backoff_max: 300_000,
            pull_backoff_after: 5_000,
            shape: ShapeCosts::default(),
        }
    }
}

/// One container of the pod spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
}

/// A readiness gate of the spec and the status of the condition it names
/// (`None`: the pod has no such condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub condition_type: String,
    pub status: Option<String>,
}

/// What the simulated kubelet reads from a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    pub uid: String,
    pub containers: Vec<ContainerSpec>,
    pub init_containers: Vec<ContainerSpec>,
    pub gates: Vec<Gate>,
    pub faults: Faults,
    /// `Some(grace period)` once `metadata.deletionTimestamp` is set.
    pub deletion_grace: Option<Ms>,
}

/// Why and how a container exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub reason: &'static str,
    pub started_at: Ms,
    pub finished_at: Ms,
    pub container_id: String,
}

/// The runtime state of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CState {
    /// Being created (ContainerCreating) with `image`, running at `at`. `restart`: the
    /// new container counts as a restart.
    Creating {
        at: Ms,
        image: String,
        restart: bool,
    },
    /// Pulling `image` failed (ErrImagePull; ImagePullBackOff once `backoff`).
    PullFailed {
        since: Ms,
        image: String,
        restart: bool,
        backoff: bool,
    },
    /// Running since `since`; ready from `ready_at` (never if `None`); exits at `crash_at`.
    Running {
        since: Ms,
        ready_at: Option<Ms>,
        crash_at: Option<Ms>,
    },
    /// Exited, waiting out CrashLoopBackOff until `until`.
    BackOff { until: Ms },
}

/// One simulated container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSim {
    pub name: String,
    /// Image of the current (or last) container; the spec image before the first start.
    pub image: String,
    pub image_id: Option<String>,
    pub container_id: Option<String>,
    pub restart_count: u32,
    pub crashes: u32,
    pub started_once: bool,
    pub ready: bool,
    pub last_terminated: Option<Terminated>,
    pub state: CState,
}

/// A pod condition the kubelet owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub status: bool,
    pub since: Ms,
    pub reason: Option<&'static str>,
    pub message: Option<String>,
}

/// The simulated runtime state of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSim {
    pub uid: String,
    pub pod_ip: String,
    pub host_ip: String,
    pub start_time: Ms,
    pub containers: Vec<ContainerSim>,
    pub containers_ready: Cond,
    pub ready: Cond,
    /// When the deletion was first seen.
    pub deleting_since: Option<Ms>,
}

/// What a pod's status already says about one container (to resume after a restart of
/// the simulator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedContainer {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: String,
    pub restart_count: u32,
    /// `Some(startedAt)` when the container is running.
    pub running_since: Option<Ms>,
    pub ready: bool,
}

/// The outcome of [`advance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// When to call [`advance`] again (nothing is pending if `None`).
    pub next_due: Option<Ms>,
    /// The grace period is over: delete the pod now.
    pub delete: bool,
}

/// The `sim://` container ID of the `restart_count`-th container `name` of pod `uid`.
pub fn container_id(uid: &str, name: &str, restart_count: u32) -> String {
    let d = sha256_hex(&format!("{uid}/{name}/{restart_count}"));
    format!(
        "sim://{}-{}-{}-{}-{}",
        &d[0..8],
        &d[8..12],
        &d[12..16],
        &d[16..20],
        &d[20..32]
    )
}

/// The image ID the simulated runtime reports for an image reference.
pub fn image_id(image: &str) -> String {
    format!("sim-image@sha256:{}", sha256_hex(image))
}

fn sha256_hex(s: &str) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest.as_ref() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn not_ready(now: Ms) -> Cond {
    Cond {
        status: false,
        since: now,
        reason: Some("ContainersNotReady"),
        message: None,
    }
}

impl PodSim {
    /// A pod seen for the first time: its containers start after `start_delay` (and the
    /// shape's sandbox and init containers, [`costs::new_pod_running_at`]); images are on
    /// the node at once.
    pub fn new(view: &PodView, pod_ip: String, host_ip: String, now: Ms, cfg: &SimConfig) -> Self {
        Self::new_with(view, pod_ip, host_ip, now, cfg, &mut |_, from| from)
    }

    /// [`PodSim::new`] with the node's image store: `image_at(image, from)` tells when
    /// `image` is on the node for a pull that would start at `from`.
    pub fn new_with(
        view: &PodView,
        pod_ip: String,
        host_ip: String,
        now: Ms,
        cfg: &SimConfig,
        image_at: &mut dyn FnMut(&str, Ms) -> Ms,
    ) -> Self {
        let running_at = costs::new_pod_running_at(cfg, view, now, image_at);
        let containers = view
            .containers
            .iter()
            .zip(running_at)
            .map(|(c, at)| creating(c, at, false))
            .collect();
        PodSim {
            uid: view.uid.clone(),
            pod_ip,
            host_ip,
            start_time: now,
            containers,
            containers_ready: not_ready(now),
            ready: not_ready(now),
            deleting_since: None,
        }
    }

    /// A pod whose status was written by an earlier run of the simulator: its running
    /// containers keep running (same IDs and restart counts), the others start anew.
    pub fn adopt(
        view: &PodView,
        pod_ip: String,
        host_ip: String,
        start_time: Ms,
        observed: &[ObservedContainer],
        now: Ms,
        cfg: &SimConfig,
    ) -> Self {
        let containers = view
            .containers
            .iter()
            .map(|spec| {
                let seen = observed
                    .iter()
                    .find(|o| o.name == spec.name && o.container_id.starts_with("sim://"));
                match seen {
                    Some(o) => {
                        let state = match o.running_since {
                            Some(since) => CState::Running {
                                since,
                                ready_at: Some(if o.ready {
                                    since
                                } else {
                                    now + costs::ready_of(cfg, &spec.name)
                                }),
                                crash_at: None,
                            },
                            None => CState::Creating {
                                at: now + costs::start_of(cfg, &spec.name),
                                image: spec.image.clone(),
                                restart: true,
                            },
                        };
                        ContainerSim {
                            name: spec.name.clone(),
                            image: o.image.clone(),
                            image_id: Some(o.image_id.clone()),
                            container_id: Some(o.container_id.clone()),
                            restart_count: o.restart_count,
                            crashes: 0,
                            started_once: true,
                            ready: o.ready && o.running_since.is_some(),
                            last_terminated: None,
                            state,
                        }
                    }
                    None => creating(spec, now + costs::start_of(cfg, &spec.name), false),
                }
            })
            .collect();
        PodSim {
            uid: view.uid.clone(),
            pod_ip,
            host_ip,
            start_time,
            containers,
            containers_ready: not_ready(start_time),
            ready: not_ready(start_time),
            deleting_since: None,
        }
    }

    /// The pod is Running (some container has started) rather than Pending.
    pub fn running(&self) -> bool {
        self.containers.iter().any(|c| c.started_once)
    }
}

fn creating(spec: &ContainerSpec, at: Ms, restart: bool) -> ContainerSim {
    ContainerSim {
        name: spec.name.clone(),
        image: spec.image.clone(),
        image_id: None,
        container_id: None,
        restart_count: 0,
        crashes: 0,
        started_once: false,
        ready: false,
        last_terminated: None,
        state: CState::Creating {
            at,
            image: spec.image.clone(),
            restart,
        },
    }
}

fn backoff(cfg: &SimConfig, crashes: u32) -> Ms {
    let shift = crashes.saturating_sub(1).min(30);
    cfg.crash_backoff
        .saturating_mul(1i64 << shift)
        .min(cfg.crash_backoff_max)
}

fn min_due(a: Option<Ms>, b: Ms) -> Option<Ms> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Applies every transition due at `now` and tells what comes next (images are on the
/// node at once).
pub fn advance(view: &PodView, sim: &mut PodSim, now: Ms, cfg: &SimConfig) -> Step {
    advance_with(view, sim, now, cfg, &mut |_| now)
}

/// [`advance`] with the node's image store: `image_at(image)` tells when `image` is on
/// the node (starting its pull if needed, [`super::images::ImageStores`]); a container
/// whose image changes starts `update_delay` after that.
pub fn advance_with(
    view: &PodView,
    sim: &mut PodSim,
    now: Ms,
    cfg: &SimConfig,
    image_at: &mut dyn FnMut(&str) -> Ms,
) -> Step {
    if let Some(grace) = view.deletion_grace {
        let since = *sim.deleting_since.get_or_insert(now);
        let at = since + costs::pod_drain(cfg, view, grace);
        return if now >= at {
            Step {
                next_due: None,
                delete: true,
            }
        } else {
            Step {
                next_due: Some(at),
                delete: false,
            }
        };
    }

    sync_containers(view, sim, now, cfg, image_at);
    let mut next_due = None;
    for c in &mut sim.containers {
        if let Some(due) = advance_container(view, c, now, cfg) {
            next_due = min_due(next_due, due);
        }
    }
    update_conditions(view, sim, now);
    Step {
        next_due,
        delete: false,
    }
}

/// Keeps the simulated containers in the order and set of the spec, and notices
/// changed images (the new container starts `update_delay` after its image is on the
/// node, `image_at`).
fn sync_containers(
    view: &PodView,
    sim: &mut PodSim,
    now: Ms,
    cfg: &SimConfig,
    image_at: &mut dyn FnMut(&str) -> Ms,
) {
    let same_names = sim.containers.len() == view.containers.len()
        && sim
            .containers
            .iter()
            .zip(&view.containers)
            .all(|(c, s)| c.name == s.name);
    if !same_names {
        let mut old = std::mem::take(&mut sim.containers);
        sim.containers = view
            .containers
            .iter()
            .map(|spec| match old.iter().position(|c| c.name == spec.name) {
                Some(i) => old.swap_remove(i),
                None => creating(spec, now + costs::start_of(cfg, &spec.name), false),
            })
            .collect();
    }
    for (c, spec) in sim.containers.iter_mut().zip(&view.containers) {
        let wanted = match &c.state {
            CState::Creating { image, .. } | CState::PullFailed { image, .. } => image,
            CState::Running { .. } | CState::BackOff { .. } => &c.image,
        };
        if *wanted == spec.image {
            continue;
        }
        let image = spec.image.clone();
        let start_at = image_at(&image).max(now) + cfg.update_delay;
        c.ready = false;
        c.state = match std::mem::replace(&mut c.state, CState::BackOff { until: now }) {
            CState::Creating {
                at, restart: false, ..
            } if !c.started_once => {
                c.image = image.clone();
                CState::Creating {
                    at,
                    image,
                    restart: false,
                }
            }
            CState::Running { since, .. } => {
                if let Some(id) = &c.container_id {
                    c.last_terminated = Some(Terminated {
                        exit_code: 0,
                        reason: "Completed",
                        started_at: since,
                        finished_at: now,
                        container_id: id.clone(),
                    });
                }
                CState::Creating {
                    at: start_at,
                    image,
                    restart: true,
                }
            }
            CState::Creating { restart, .. } | CState::PullFailed { restart, .. } => {
                if !c.started_once {
                    c.image = image.clone();
                }
                CState::Creating {
                    at: start_at,
                    image,
                    restart,
                }
            }
            CState::BackOff { .. } => CState::Creating {
                at: start_at,
                image,
                restart: true,
            },
        };
    }
}

/// Runs one container's due transitions; returns when its next one is due.
fn advance_container(view: &PodView, c: &mut ContainerSim, now: Ms, cfg: &SimConfig) -> Option<Ms> {
    let faults = &view.faults;
    // Each pass either moves the state forward in time or stops; a pod can go through
    // several transitions at once (zero delays, or after a long pause of the simulator).
    for _ in 0..64 {
        let next = match &c.state {
            CState::Creating { at, image, restart } if *at <= now => {
                let (at, restart) = (*at, *restart);
                if faults.pull_fails(image) {
                    Some(CState::PullFailed {
                        since: at,
                        image: image.clone(),
                        restart,
                        backoff: false,
                    })
                } else {
                    c.image = image.clone();
                    c.image_id = Some(image_id(image));
                    if restart {
                        c.restart_count += 1;
                    }
                    c.container_id = Some(container_id(&view.uid, &c.name, c.restart_count));
                    c.started_once = true;
                    let ready = if restart {
                        costs::restart_ready_of(cfg, &c.name)
                    } else {
                        costs::ready_of(cfg, &c.name)
                    };
                    Some(start(faults, at, cfg, ready))
                }
            }
            CState::PullFailed {
                image,
                restart,
                since,
                backoff,
            } => {
                if !faults.pull_fails(image) {
                    Some(CState::Creating {
                        at: now,
                        image: image.clone(),
                        restart: *restart,
                    })
                } else if !*backoff && since + cfg.pull_backoff_after <= now {
                    Some(CState::PullFailed {
                        since: *since,
                        image: image.clone(),
                        restart: *restart,
                        backoff: true,
                    })
                } else {
                    None
                }
            }
            CState::Running {
                since, crash_at, ..
            } => match (*crash_at, faults.crash_loop) {
                (Some(t), _) if t <= now => {
                    if let Some(id) = &c.container_id {
                        c.last_terminated = Some(Terminated {
                            exit_code: 1,
                            reason: "Error",
                            started_at: *since,
                            finished_at: t,
                            container_id: id.clone(),
                        });
                    }
                    c.crashes += 1;
                    Some(CState::BackOff {
                        until: t + backoff(cfg, c.crashes),
                    })
                }
                (None, true) => Some(CState::Running {
                    since: *since,
                    ready_at: None,
                    crash_at: Some(now.max(*since) + cfg.crash_run),
                }),
                (Some(_), false) => Some(CState::Running {
                    since: *since,
                    ready_at: Some(now + costs::ready_of(cfg, &c.name) + faults.slow_start),
                    crash_at: None,
                }),
                _ => None,
            },
            CState::BackOff { until } if *until <= now => {
                let until = *until;
                c.restart_count += 1;
                c.container_id = Some(container_id(&view.uid, &c.name, c.restart_count));
                Some(start(faults, until, cfg, costs::ready_of(cfg, &c.name)))
            }
            CState::Creating { .. } | CState::BackOff { .. } => None,
        };
        match next {
            Some(state) => c.state = state,
            None => break,
        }
    }
    c.ready = matches!(c.state, CState::Running { ready_at: Some(t), .. } if t <= now);
    match &c.state {
        CState::Creating { at, .. } => Some(*at),
        CState::PullFailed {
            since,
            backoff: false,
            ..
        } => Some(since + cfg.pull_backoff_after),
        CState::PullFailed { .. } => None,
        CState::Running {
            ready_at, crash_at, ..
        } => {
            let ready_due = ready_at.filter(|t| *t > now);
            match (ready_due, crash_at) {
                (Some(a), Some(b)) => Some(a.min(*b)),
                (a, b) => a.or(*b),
            }
        }
        CState::BackOff { until } => Some(*until),
    }
}

/// A container running from `at`, ready `ready` later (unless it crash-loops).
fn start(faults: &Faults, at: Ms, cfg: &SimConfig, ready: Ms) -> CState {
    if faults.crash_loop {
        CState::Running {
            since: at,
            ready_at: None,
            crash_at: Some(at + cfg.crash_run),
        }
    } else {
        CState::Running {
            since: at,
            ready_at: Some(at + ready + faults.slow_start),
            crash_at: None,
        }
    }
}

fn set_cond(
    cond: &mut Cond,
    status: bool,
    reason: Option<&'static str>,
    message: Option<String>,
    now: Ms,
) {
    if cond.status != status {
        cond.since = now;
        cond.status = status;
    }
    cond.reason = reason;
    cond.message = message;
}

/// ContainersReady and Ready, by the kubelet's rules: Ready needs every container ready
/// and every readiness gate's condition present and True.
fn update_conditions(view: &PodView, sim: &mut PodSim, now: Ms) {
    let unready: Vec<&str> = sim
        .containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let containers_ready = unready.is_empty() && !sim.containers.is_empty();
    let (reason, message) = if containers_ready {
        (None, None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    set_cond(
        &mut sim.containers_ready,
        containers_ready,
        reason,
        message.clone(),
        now,
    );

    let gate_messages: Vec<String> = view
        .gates
        .iter()
        .filter_map(|g| match g.status.as_deref() {
            Some("True") => None,
            None => Some(format!(
                "corresponding condition of pod readiness gate \"{}\" does not exist.",
                g.condition_type
            )),
            Some(other) => Some(format!(
                "the status of pod readiness gate \"{}\" is not \"True\", but {}",
                g.condition_type, other
            )),
        })
        .collect();
    if !containers_ready {
        set_cond(&mut sim.ready, false, reason, message, now);
    } else if !gate_messages.is_empty() {
        set_cond(
            &mut sim.ready,
            false,
            Some("ReadinessGatesNotReady"),
            Some(gate_messages.join(", ")),
            now,
        );
    } else {
        set_cond(&mut sim.ready, true, None, None, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodesim::fault::PullFailure;

    fn cfg() -> SimConfig {
        SimConfig {
            start_delay: 100,
            ready_delay: 500,
            update_delay: 1_000,
            max_grace: 2_000,
            crash_run: 1_000,
            crash_backoff: 10_000,
            crash_backoff_max: 40_000,
            pull_backoff_after: 5_000,
            shape: ShapeCosts::default(),
        }
    }

    fn view(images: &[(&str, &str)]) -> PodView {
        PodView {
            uid: "uid-1".into(),
            containers: images
                .iter()
                .map(|(n, i)| ContainerSpec {
                    name: (*n).into(),
                    image: (*i).into(),
                })
                .collect(),
            ..PodView::default()
        }
    }

    fn new_pod(v: &PodView, now: Ms) -> PodSim {
        PodSim::new(v, "10.200.0.1".into(), "10.199.0.1".into(), now, &cfg())
    }

    /// Runs `advance` at every due time up to `until`, like the engine's timer would.
    fn run_until(v: &PodView, sim: &mut PodSim, from: Ms, until: Ms) -> Step {
        let mut now = from;
        loop {
            let step = advance(v, sim, now, &cfg());
            match step.next_due {
                Some(t) if t <= until && !step.delete => now = t.max(now),
                _ => return step,
            }
        }
    }

    #[test]
    fn pending_running_ready_timeline() {
        let v = view(&[("app", "reg/app:v1")]);
        let mut sim = new_pod(&v, 0);
        let table: &[(Ms, bool, bool, bool, Option<Ms>)] = &[
            // now, running, container ready, pod ready, next due
            (0, false, false, false, Some(100)),
            (99, false, false, false, Some(100)),
            (100, true, false, false, Some(600)),
            (599, true, false, false, Some(600)),
            (600, true, true, true, None),
            (10_000, true, true, true, None),
        ];
        for &(now, running, c_ready, p_ready, due) in table {
            let step = advance(&v, &mut sim, now, &cfg());
            assert_eq!(sim.running(), running, "running at {now}");
            assert_eq!(sim.containers[0].ready, c_ready, "container ready at {now}");
            assert_eq!(sim.ready.status, p_ready, "pod ready at {now}");
            assert_eq!(step.next_due, due, "due at {now}");
        }
        let c = &sim.containers[0];
        assert_eq!(c.restart_count, 0);
        assert_eq!(c.image_id.as_deref(), Some(image_id("reg/app:v1").as_str()));
        assert_eq!(sim.ready.since, 600);
        assert_eq!(sim.containers_ready.since, 600);
    }

    #[test]
    fn zero_delays_go_straight_to_ready() {
        let v = view(&[("a", "x"), ("b", "y")]);
        let zero = SimConfig {
            start_delay: 0,
            ready_delay: 0,
            ..cfg()
        };
        let mut sim = PodSim::new(&v, String::new(), String::new(), 5, &zero);
        let step = advance(&v, &mut sim, 5, &zero);
        assert!(sim.ready.status);
        assert_eq!(step.next_due, None);
    }

    #[test]
    fn readiness_gates_hold_ready() {
        let mut v = view(&[("app", "i")]);
        v.gates = vec![Gate {
            condition_type: "InPlaceUpdateReady".into(),
            status: None,
        }];
        let mut sim = new_pod(&v, 0);
        run_until(&v, &mut sim, 0, 10_000);
        assert!(sim.containers_ready.status);
        assert!(!sim.ready.status);
        assert_eq!(sim.ready.reason, Some("ReadinessGatesNotReady"));
        assert!(
            sim.ready
                .message
                .as_deref()
                .is_some_and(|m| m.contains("does not exist"))
        );

        v.gates[0].status = Some("False".into());
        advance(&v, &mut sim, 11_000, &cfg());
        assert!(!sim.ready.status);
        assert!(
            sim.ready
                .message
                .as_deref()
                .is_some_and(|m| m.contains("but False"))
        );

        v.gates[0].status = Some("True".into());
        advance(&v, &mut sim, 12_000, &cfg());
        assert!(sim.ready.status);
        assert_eq!(sim.ready.since, 12_000);
        assert_eq!(sim.ready.reason, None);

        v.gates[0].status = Some("False".into());
        advance(&v, &mut sim, 13_000, &cfg());
        assert!(!sim.ready.status);
        assert!(sim.containers_ready.status);
    }

    #[test]
    fn image_change_restarts_in_place() {
        let mut v = view(&[("app", "reg/app:v1"), ("side", "reg/side:v1")]);
        let mut sim = new_pod(&v, 0);
        run_until(&v, &mut sim, 0, 1_000);
        assert!(sim.ready.status);
        let before = sim.containers.clone();

        v.containers[0].image = "reg/app:v2".into();
        let step = advance(&v, &mut sim, 5_000, &cfg());
        let c = &sim.containers[0];
        assert!(!c.ready, "not ready while restarting");
        assert!(!sim.ready.status);
        assert_eq!(c.restart_count, 0);
        assert_eq!(
            c.image, "reg/app:v1",
            "status keeps the old image until the restart"
        );
        assert_eq!(step.next_due, Some(6_000));
        assert_eq!(
            sim.containers[1], before[1],
            "the other container is untouched"
        );

        advance(&v, &mut sim, 6_000, &cfg());
        let c = &sim.containers[0];
        assert_eq!(c.restart_count, 1);
        assert_eq!(c.image, "reg/app:v2");
        assert_ne!(c.image_id, before[0].image_id);
        assert_ne!(c.container_id, before[0].container_id);
        assert!(c.started_once && !c.ready);
        let last = c
            .last_terminated
            .as_ref()
            .map(|t| (t.reason, t.container_id.clone()));
        assert_eq!(
            last,
            Some((
                "Completed",
                before[0].container_id.clone().unwrap_or_default()
            ))
        );

        advance(&v, &mut sim, 6_500, &cfg());
        assert!(sim.ready.status);
        assert_eq!(sim.pod_ip, "10.200.0.1");
        assert_eq!(sim.uid, "uid-1");
    }

    #[test]
    fn image_change_waits_for_the_image_on_the_node() {
        use crate::nodesim::images::ImageStores;
        // (what, image already pulled or being pulled since, new container running at)
        let cases: [(&str, Option<Ms>, Ms); 3] = [
            ("not on the node: a pull of 4 s first", None, 10_000),
            ("pulled before: no wait", Some(0), 6_000),
            ("being pulled since 3 s: the rest of it", Some(3_000), 8_000),
        ];
        for (what, pulled_since, want) in cases {
            let mut v = view(&[("app", "reg/app:v1")]);
            let mut sim = new_pod(&v, 0);
            run_until(&v, &mut sim, 0, 1_000);
            let mut stores = ImageStores::new(4_000);
            if let Some(since) = pulled_since {
                stores.available_at("n1", "reg/app:v2", since);
            }
            v.containers[0].image = "reg/app:v2".into();
            let mut image_at = |image: &str| stores.available_at("n1", image, 5_000);
            let step = advance_with(&v, &mut sim, 5_000, &cfg(), &mut image_at);
            assert_eq!(step.next_due, Some(want), "{what}");
            advance_with(&v, &mut sim, want - 1, &cfg(), &mut image_at);
            assert_eq!(sim.containers[0].restart_count, 0, "{what}: not yet");
            advance_with(&v, &mut sim, want, &cfg(), &mut image_at);
            assert_eq!(sim.containers[0].image, "reg/app:v2", "{what}");
            assert_eq!(sim.containers[0].restart_count, 1, "{what}");
        }
    }

    #[test]
    fn image_change_while_creating_does_not_count_a_restart() {
        let mut v = view(&[("app", "v1")]);
        let mut sim = new_pod(&v, 0);
        advance(&v, &mut sim, 50, &cfg());
        v.containers[0].image = "v2".into();
        run_until(&v, &mut sim, 60, 10_000);
        let c = &sim.containers[0];
        assert_eq!((c.image.as_str(), c.restart_count), ("v2", 0));
        assert!(sim.ready.status);
    }

    #[test]
    fn image_pull_failure_never_ready_and_recovers_on_fix() {
        let mut v = view(&[("app", "reg/app:bad")]);
        v.faults.image_pull_failure = Some(PullFailure::Matching(":bad".into()));
        let mut sim = new_pod(&v, 0);
        advance(&v, &mut sim, 100, &cfg());
        assert!(matches!(
            sim.containers[0].state,
            CState::PullFailed { backoff: false, .. }
        ));
        let step = run_until(&v, &mut sim, 100, 60_000);
        assert!(matches!(
            sim.containers[0].state,
            CState::PullFailed { backoff: true, .. }
        ));
        assert_eq!(step.next_due, None);
        assert!(!sim.running() && !sim.ready.status);

        v.containers[0].image = "reg/app:good".into();
        let step = advance(&v, &mut sim, 70_000, &cfg());
        assert_eq!(step.next_due, Some(71_000));
        run_until(&v, &mut sim, 71_000, 80_000);
        assert!(sim.ready.status);
        assert_eq!(sim.containers[0].restart_count, 0);
    }

    #[test]
    fn crash_loop_backs_off_and_counts_restarts() {
        let mut v = view(&[("app", "i")]);
        v.faults.crash_loop = true;
        let mut sim = new_pod(&v, 0);
        // Start at 100, crash at 1100, backoff 10s → restart at 11100, crash 12100,
        // backoff 20s → 32100, crash 33100, backoff 40s (cap) → 73100 …
        let table: &[(Ms, u32, bool)] = &[
            (100, 0, false),
            (1_100, 0, true),
            (11_100, 1, false),
            (12_100, 1, true),
            (32_100, 2, false),
            (33_100, 2, true),
            (73_100, 3, false),
        ];
        for &(now, restarts, backing_off) in table {
            advance(&v, &mut sim, now, &cfg());
            let c = &sim.containers[0];
            assert_eq!(c.restart_count, restarts, "restarts at {now}");
            assert_eq!(
                matches!(c.state, CState::BackOff { .. }),
                backing_off,
                "backoff at {now}"
            );
            assert!(!c.ready && !sim.ready.status);
        }
        assert!(sim.running());
        let last = sim.containers[0]
            .last_terminated
            .as_ref()
            .map(|t| t.exit_code);
        assert_eq!(last, Some(1));

        // The fault is lifted: the next start stays up and becomes ready.
        v.faults.crash_loop = false;
        run_until(&v, &mut sim, 73_200, 200_000);
        assert!(sim.ready.status);
        assert_eq!(sim.containers[0].restart_count, 3);
    }

    #[test]
    fn slow_start_delays_ready() {
        let mut v = view(&[("app", "i")]);
        v.faults.slow_start = 3_000;
        let mut sim = new_pod(&v, 0);
        run_until(&v, &mut sim, 0, 3_599);
        assert!(sim.running() && !sim.ready.status);
        run_until(&v, &mut sim, 3_599, 3_600);
        assert!(sim.ready.status);
    }

    #[test]
    fn deletion_waits_min_of_grace_and_max_grace() {
        let table: &[(Ms, Ms, Ms)] = &[
            // grace, seen at, delete at
            (30_000, 1_000, 3_000),
            (500, 1_000, 1_500),
            (0, 1_000, 1_000),
        ];
        for &(grace, seen, want) in table {
            let mut v = view(&[("app", "i")]);
            let mut sim = new_pod(&v, 0);
            v.deletion_grace = Some(grace);
            let step = advance(&v, &mut sim, seen, &cfg());
            if want == seen {
                assert!(step.delete);
                continue;
            }
            assert_eq!(
                step,
                Step {
                    next_due: Some(want),
                    delete: false
                }
            );
            assert!(!advance(&v, &mut sim, want - 1, &cfg()).delete);
            assert!(advance(&v, &mut sim, want, &cfg()).delete);
        }
    }

    #[test]
    fn adopt_keeps_running_containers() {
        let v = view(&[("app", "v1"), ("new", "n1")]);
        let observed = vec![ObservedContainer {
            name: "app".into(),
            image: "v1".into(),
            image_id: image_id("v1"),
            container_id: container_id("uid-1", "app", 2),
            restart_count: 2,
            running_since: Some(50),
            ready: true,
        }];
        let mut sim = PodSim::adopt(&v, "ip".into(), "h".into(), 10, &observed, 1_000, &cfg());
        advance(&v, &mut sim, 1_000, &cfg());
        assert!(sim.containers[0].ready);
        assert_eq!(sim.containers[0].restart_count, 2);
        assert!(!sim.containers[1].started_once);
        run_until(&v, &mut sim, 1_000, 5_000);
        assert!(sim.ready.status);
        assert_eq!(sim.start_time, 10);
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        assert_eq!(container_id("u", "c", 0), container_id("u", "c", 0));
        assert_ne!(container_id("u", "c", 0), container_id("u", "c", 1));
        assert!(container_id("u", "c", 0).starts_with("sim://"));
        assert_eq!(image_id("a").len(), "sim-image@sha256:".len() + 64);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever happens (image changes, gate flips, fault toggles at random
            /// times), the pod is Ready exactly when every container is ready and every
            /// gate is True, restart counts never go down, and the next due time is never
            /// in the past.
            #[test]
            fn invariants(events in proptest::collection::vec((0i64..5_000, 0u8..6), 1..40)) {
                let mut v = view(&[("a", "i0"), ("b", "j0")]);
                v.gates = vec![Gate { condition_type: "G".into(), status: None }];
                let mut sim = new_pod(&v, 0);
                let mut now = 0;
                let mut restarts = [0u32; 2];
                for (i, (dt, what)) in events.into_iter().enumerate() {
                    now += dt;
                    match what {
                        0 => v.containers[0].image = format!("i{i}"),
                        1 => v.gates[0].status = Some("True".into()),
                        2 => v.gates[0].status = Some("False".into()),
                        3 => v.faults.crash_loop = !v.faults.crash_loop,
                        4 => v.faults.image_pull_failure = match v.faults.image_pull_failure {
                            None => Some(PullFailure::Any),
                            Some(_) => None,
                        },
                        _ => {}
                    }
                    let step = advance(&v, &mut sim, now, &cfg());
                    if let Some(t) = step.next_due {
                        prop_assert!(t >= now, "due {} before now {}", t, now);
                    }
                    let all_ready = sim.containers.iter().all(|c| c.ready);
                    let gates = v.gates.iter().all(|g| g.status.as_deref() == Some("True"));
                    prop_assert_eq!(sim.ready.status, all_ready && gates);
                    prop_assert_eq!(sim.containers_ready.status, all_ready);
                    for (c, r) in sim.containers.iter().zip(restarts.iter_mut()) {
                        prop_assert!(c.restart_count >= *r);
                        *r = c.restart_count;
                        if c.ready {
                            prop_assert!(v.containers.iter().any(|s| s.name == c.name && s.image == c.image));
                        }
                    }
                }
            }
        }
    }
}
