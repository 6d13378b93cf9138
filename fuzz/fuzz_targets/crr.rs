//! ContainerRecreateRequest objects (anyone who may create one in a namespace), as the
//! daemon and the controller read them from the API server (JSON): the daemon's next step
//! (which container to kill, with which hook and grace period), the controller's
//! webhook-equivalent fill-in against the pod, its plan (not-ready gate, status snapshot,
//! TTL) and the order among a pod's requests.
#![no_main]

use inplace_controller::crr::plan as controller;
use inplace_daemon::crr::decide::{self, Instance};
use inplace_fuzz::{now, object, partition_fixture};
use inplace_proto::{ContainerRecreateRequest, ProbeHandler};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(crr) = object::<ContainerRecreateRequest>(text) else {
        return;
    };
    let _ = crr.failure_policy();
    let _ = crr.phase();
    let _ = crr.run_order_key();
    let _ = crr.is_completed();

    // The daemon.
    let instance = |name: &str| {
        (name == "nginx").then(|| Instance {
            id: "c1".into(),
            running: true,
            started_at: 1_772_366_000_000_000_000,
        })
    };
    let pre_stop = |_: &str| None::<ProbeHandler>;
    for (uid, grace) in [
        (Some("7c2e0000-0000-4000-8000-000000000000"), 30),
        (None, i64::MAX),
        (Some("other"), i64::MIN),
    ] {
        let mut step = decide::step(&crr, uid, &instance, &pre_stop, grace, now());
        if let Some(kill) = step.kill.take() {
            decide::record_kill(&mut step.status, &kill.container, Ok(()));
            decide::record_kill(&mut step.status, &kill.container, Err("x".into()));
        }
    }

    // The controller, against the fixture's first pod (or no pod).
    let pod = partition_fixture().and_then(|f| f.pods.first());
    let _ = controller::is_filled(&crr);
    let _ = controller::fill(&crr, pod);
    let _ = controller::fill(&crr, None);
    let _ = controller::active_name(&[&crr], Some("7c2e0000-0000-4000-8000-000000000000"));
    let _ = controller::not_ready_key(&crr);
    if let Some(pod) = pod {
        let _ = controller::sync_container_statuses(&crr, pod);
    }
    let _ = controller::plan(&crr, pod, &[&crr], now());
    let _ = controller::plan(&crr, None, &[], now());
});
