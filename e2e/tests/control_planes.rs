//! The API-server behaviour Meridian's controllers rely on, proved on three real control planes
//! started at once (a hub and two spokes): watches, optimistic concurrency, finalizers, the status
//! subresource, server-side-apply ownership and CEL validation.

use std::path::Path;

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Api, Client};
use meridian_e2e::{
    ControlPlane, DEFAULT_PATIENCE, Error, Fleet, eventually, install_crds, load_crds,
    pinned_kubernetes_version,
};
use serde_json::json;

const NAMESPACE: &str = "default";

fn widgets(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "testbed.meridian.dev".into(),
        version: "v1".into(),
        api_version: "testbed.meridian.dev/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    Api::namespaced_with(client.clone(), NAMESPACE, &resource)
}

fn widget(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "testbed.meridian.dev/v1",
        "kind": "Widget",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .expect("valid widget")
}

fn api_error_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[tokio::test]
async fn three_control_planes_serve_custom_resources() -> Result<(), Error> {
    let fleet = Fleet::builder()
        .spokes(["spoke-1", "spoke-2"])
        .without_ocm()
        .start()
        .await?;
    assert_eq!(fleet.clusters().count(), 3);

    // The apiserver was stamped with the release it was built from, so /version reports it.
    let pinned = pinned_kubernetes_version().expect("the test bed pins a Kubernetes release");
    for cluster in fleet.clusters() {
        assert_eq!(
            cluster.client().apiserver_version().await?.git_version,
            pinned
        );
    }

    // Each control plane is its own cluster: its own CA, port and kube-system UID.
    let mut cluster_ids: Vec<String> = Vec::new();
    for cluster in fleet.clusters() {
        cluster_ids.push(cluster.cluster_id().await?);
    }
    cluster_ids.sort();
    cluster_ids.dedup();
    assert_eq!(
        cluster_ids.len(),
        3,
        "every control plane has its own cluster ID"
    );

    let fixture = load_crds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))?;
    futures::future::try_join_all(fleet.clusters().map(|cluster| {
        let fixture = fixture.clone();
        async move { exercise_api_server(cluster, &fixture).await }
    }))
    .await?;
    Ok(())
}

async fn exercise_api_server(
    cluster: &ControlPlane,
    fixture: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
) -> Result<(), Error> {
    let client = cluster.client();
    install_crds(&client, fixture).await?;
    let api = widgets(&client);
    create_watch_delete(&api).await?;
    stale_update_conflicts(&api).await?;
    finalizer_blocks_deletion(&api).await?;
    status_subresource_ignores_spec(&api).await?;
    server_side_apply_conflict(&api).await?;
    cel_message_reaches_client(&api).await?;
    Ok(())
}

async fn create_watch_delete(api: &Api<DynamicObject>) -> Result<(), Error> {
    let list = api.list(&Default::default()).await?;
    let version = list
        .metadata
        .resource_version
        .expect("list has a resourceVersion");
    let mut events = api
        .watch(&WatchParams::default().timeout(60), &version)
        .await?
        .boxed();

    api.create(
        &PostParams::default(),
        &widget("watched", json!({"color": "red"})),
    )
    .await?;
    api.delete("watched", &DeleteParams::default()).await?;

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = events
            .try_next()
            .await?
            .expect("watch ended before both events arrived");
        match event {
            WatchEvent::Added(object) => seen.push(("ADDED", object.metadata.name)),
            WatchEvent::Deleted(object) => seen.push(("DELETED", object.metadata.name)),
            WatchEvent::Modified(_) | WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(status) => panic!("watch error: {status:?}"),
        }
    }
    let watched = Some("watched".to_string());
    assert_eq!(seen, vec![("ADDED", watched.clone()), ("DELETED", watched)]);
    assert!(api.get_opt("watched").await?.is_none());
    Ok(())
}

async fn stale_update_conflicts(api: &Api<DynamicObject>) -> Result<(), Error> {
    let created = api
        .create(
            &PostParams::default(),
            &widget("versioned", json!({"color": "red"})),
        )
        .await?;

    let mut fresh = created.clone();
    fresh.data["spec"]["color"] = json!("green");
    let updated = api
        .replace("versioned", &PostParams::default(), &fresh)
        .await?;
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );

    let mut stale = created;
    stale.data["spec"]["color"] = json!("blue");
    let error = api
        .replace("versioned", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!(
        api_error_code(&error),
        Some(409),
        "stale resourceVersion must conflict: {error}"
    );
    assert_eq!(api.get("versioned").await?.data["spec"]["color"], "green");
    Ok(())
}

async fn finalizer_blocks_deletion(api: &Api<DynamicObject>) -> Result<(), Error> {
    let mut held = widget("held", json!({"color": "red"}));
    held.metadata.finalizers = Some(vec!["testbed.meridian.dev/hold".to_string()]);
    api.create(&PostParams::default(), &held).await?;

    api.delete("held", &DeleteParams::default()).await?;
    let terminating = api.get("held").await?;
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "deletion is pending"
    );

    let release = json!({"metadata": {"finalizers": null}});
    api.patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await?;
    eventually(
        "the released widget to disappear",
        DEFAULT_PATIENCE,
        || async { Ok(api.get_opt("held").await?.is_none().then_some(())) },
    )
    .await
}

async fn status_subresource_ignores_spec(api: &Api<DynamicObject>) -> Result<(), Error> {
    api.create(
        &PostParams::default(),
        &widget("statused", json!({"color": "red"})),
    )
    .await?;

    let through_status = json!({"spec": {"color": "purple"}, "status": {"observedColor": "red"}});
    let through_main = json!({"status": {"observedColor": "forged"}});
    let (after, after_main) =
        meridian_e2e::patch_status_then_main(api, "statused", through_status, through_main).await?;
    assert_eq!(
        after.data["spec"]["color"], "red",
        "spec is not writable through /status"
    );
    assert_eq!(after.data["status"]["observedColor"], "red");
    assert_eq!(
        after_main.data["status"]["observedColor"], "red",
        "status is not writable through the main resource"
    );
    Ok(())
}

async fn server_side_apply_conflict(api: &Api<DynamicObject>) -> Result<(), Error> {
    let red = widget("applied", json!({"color": "red"}));
    api.patch(
        "applied",
        &PatchParams::apply("manager-a"),
        &Patch::Apply(&red),
    )
    .await?;

    let blue = widget("applied", json!({"color": "blue"}));
    let error = api
        .patch(
            "applied",
            &PatchParams::apply("manager-b"),
            &Patch::Apply(&blue),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_error_code(&error),
        Some(409),
        "a second manager conflicts: {error}"
    );
    assert!(
        error.to_string().contains("manager-a"),
        "the conflict names the owner: {error}"
    );
    assert_eq!(api.get("applied").await?.data["spec"]["color"], "red");

    let forced = api
        .patch(
            "applied",
            &PatchParams::apply("manager-b").force(),
            &Patch::Apply(&blue),
        )
        .await?;
    assert_eq!(forced.data["spec"]["color"], "blue");
    let managers: Vec<_> = forced
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|entry| entry.manager)
        .collect();
    assert!(
        managers.contains(&"manager-b".to_string()),
        "forcing takes ownership: {managers:?}"
    );
    Ok(())
}

async fn cel_message_reaches_client(api: &Api<DynamicObject>) -> Result<(), Error> {
    let invalid = widget("inverted", json!({"minReplicas": 5, "maxReplicas": 1}));
    let error = api
        .create(&PostParams::default(), &invalid)
        .await
        .unwrap_err();
    assert_eq!(
        api_error_code(&error),
        Some(422),
        "CEL rejects the object: {error}"
    );
    assert!(
        error
            .to_string()
            .contains("minReplicas must not exceed maxReplicas"),
        "the rule's message reaches the client: {error}"
    );
    assert!(api.get_opt("inverted").await?.is_none());

    let valid = widget("ordered", json!({"minReplicas": 1, "maxReplicas": 5}));
    api.create(&PostParams::default(), &valid).await?;
    Ok(())
}
