//! NodeImage objects (spec written by the controller or anyone allowed to, status written
//! by the daemons), as both sides read them from the API server (JSON): the daemon's
//! puller plan (which tags to pull or cancel, retry parameters, deadlines, the status
//! aggregate and its patch, the reference it hands the runtime) and the controller's
//! NodeImage lifecycle (TTLs, deadlines, orphaned tags, the status counts).
#![no_main]

use std::collections::BTreeMap;
use std::time::Duration;

use inplace_controller::imagepulljob::lifecycle;
use inplace_daemon::puller::auth::check_reference;
use inplace_daemon::puller::plan::{self, PullParams, TagKey};
use inplace_fuzz::{now, object, ready_node};
use inplace_proto::NodeImage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(ni) = object::<NodeImage>(text) else {
        return;
    };
    let spec = &ni.spec;
    let reported = ni.status.clone().unwrap_or_default();

    // The daemon: every tag it would run, one of them already running at another version.
    let mut running = BTreeMap::new();
    for (image, ispec) in &spec.images {
        for t in &ispec.tags {
            let key = TagKey::new(image, &t.tag);
            let _ = check_reference(&key.reference());
            let params = PullParams::from_spec(t);
            let _ = params.attempt_deadline(Duration::ZERO);
            let _ = params.attempt_deadline(Duration::from_secs(u64::MAX / 2));
            if running.is_empty() {
                running.insert(key, t.version.wrapping_add(1));
            }
        }
    }
    running.insert(TagKey::new("gone", "v1"), 1);
    let p = plan::reconcile(spec, &reported, &running);
    for s in &p.start {
        let _ = s.params.attempt_deadline(Duration::from_secs(1));
    }
    let live = reported
        .image_statuses
        .iter()
        .flat_map(|(image, s)| {
            s.tags
                .iter()
                .map(move |t| (TagKey::new(image, &t.tag), t.clone()))
        })
        .collect();
    let aggregate = plan::aggregate(spec, &live);
    let _ = plan::status_patch(
        ni.status.as_ref(),
        &aggregate,
        ni.metadata.resource_version.as_deref(),
    );
    let _ = plan::status_patch(None, &aggregate, None);

    // The controller: the NodeImage of a Ready node, of a node that is gone.
    let node = ready_node(ni.metadata.name.as_deref().unwrap_or("n1"));
    let jobs = BTreeMap::from([(
        ("default".to_owned(), "job".to_owned()),
        "uid-job".to_owned(),
    )]);
    for node in [Some(&node), None] {
        let _ = lifecycle::plan(&lifecycle::Input {
            node,
            node_image: Some(&ni),
            jobs: &jobs,
            now: now(),
        });
    }
});
