//! The fault-injection suite's parts (`inplace-faults` runs them on the bed).
//!
//! Pure parts (unit tested): [`rng`] (a seeded generator), [`injection`] (which fault a
//! request gets), [`invariants`] (the checks over pod and PVC states of the watches), [`inplace`]
//! (the in-place checks of the daemon scenario), [`plane_restarts`] (how the runs' waits
//! count the shared API server's restarts), [`records`]
//! (the checks over the proxy's record of requests), [`runtime_view`] (the node suite's
//! checks over containerd's own list of containers), [`figures`] (the
//! totals of many runs). I/O: [`proxy`] (the HTTP proxy between the controller and the
//! API server that injects the faults and records every request), [`cri_proxy`] (the
//! byte proxy on the CRI socket between the daemon and containerd), [`bed_containerd`]
//! (the bed's containerd stopped and started), [`pull_proxy`] (a registry proxy that cuts
//! pulls halfway).
//!
//! The node suite's invariants (issue 28), each with the unit test that feeds its checker
//! a history that breaks it, as containerd and the unfaulted watch would show a daemon
//! that broke it:
//! - every in-place update ends, done or failed with a condition saying why, within the
//!   bound after the faults stop ([`ending::judge`]): `ending::tests::
//!   a_change_that_can_succeed_must_end_done_on_every_pod`,
//!   `a_change_that_cannot_succeed_must_end_failed_saying_why` (ended done, hung
//!   silently), `the_history_of_an_update_that_cannot_succeed`;
//! - each container restarted exactly once per update ([`runtime_view::check`],
//!   [`inplace::InPlaceChecker`]): `runtime_view::tests::a_container_restarted_twice_is_reported`,
//!   `a_second_restart_seen_only_as_an_exited_container_is_reported`,
//!   `a_container_not_restarted_is_reported`, `a_new_container_from_before_the_change_is_reported`,
//!   `an_update_that_cannot_succeed_stops_the_container_and_makes_none`;
//!   `inplace::tests::marked_ready_before_the_new_container_runs_is_a_violation`;
//! - no container of a pod outside the update touched ([`runtime_view::check`]):
//!   `a_pod_outside_the_update_restarted_is_reported`,
//!   `a_pod_outside_the_update_stopped_or_given_another_container_is_reported`;
//! - no ContainerRecreateRequest runs twice ([`runtime_view::check`] on its target):
//!   `a_recreate_request_run_twice_is_reported`;
//! - a NodeImage's status matches containerd ([`runtime_view::check_pulled`]):
//!   `runtime_view::pulled_tests::succeeded_but_not_held_is_reported`,
//!   `succeeded_with_another_image_id_is_reported`, `failed_but_held_or_silent_is_reported`,
//!   `a_pull_that_never_ended_is_reported`.

pub mod bed_containerd;
pub mod cri_proxy;
pub mod ending;
pub mod figures;
pub mod injection;
pub mod inplace;
pub mod invariants;
pub mod plane_restarts;
pub mod proxy;
pub mod pull_proxy;
pub mod records;
pub mod rng;
pub mod runtime_view;
