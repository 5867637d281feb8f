//! The deployment files of a federation fan-out tree are consistent with each other and
//! with sluice: every YAML document under deploy/kubernetes parses and names its
//! apiVersion, kind and metadata.name; the kustomization lists every manifest; every
//! Service and PodDisruptionBudget selects exactly one workload; every probe points at a
//! port its container declares, where the management listener of that pod's
//! configuration listens, with credentials that configuration admits to the API; every
//! ConfigMap's sluice.toml parses and validates with sluice's own parser; each relay's
//! upstream URI dials a Service of the manifests on a port that Service has, with
//! certificate files the pod mounts; and deploy/federation/*.toml parse and validate.
//! Where kubectl is installed, `kubectl kustomize` must build the tree, and where it
//! also reaches an API server, `kubectl apply --dry-run=client` must accept it.
//!
//! Nothing here starts a broker: the files are data, read from the source tree.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use sluice::client::AmqpUrl;
use sluice::config::{file, Config};
use yaml_rust2::{Yaml, YamlLoader};

const KUBERNETES: &str = "deploy/kubernetes";
const FEDERATION: &str = "deploy/federation";
/// The paths the management listener answers with a shard-backed figure (src/http).
const HEALTH_PATHS: [&str; 2] = ["/api/overview", "/metrics"];
const PROBES: [&str; 3] = ["startupProbe", "readinessProbe", "livenessProbe"];
const WORKLOAD_KINDS: [&str; 3] = ["StatefulSet", "Deployment", "DaemonSet"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One YAML document and the file it came from.
struct Doc {
    file: String,
    yaml: Yaml,
}

impl Doc {
    fn kind(&self) -> &str {
        self.yaml["kind"].as_str().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.yaml["metadata"]["name"].as_str().unwrap_or("")
    }

    fn label(&self) -> String {
        format!("{} {} ({})", self.kind(), self.name(), self.file)
    }
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Every document of every manifest; each file must hold at least one.
fn documents() -> Vec<Doc> {
    let dir = root().join(KUBERNETES);
    let files = yaml_files(&dir);
    assert!(!files.is_empty(), "no YAML files under {KUBERNETES}");
    let mut docs = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(&dir)
            .expect("under the directory")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).expect("read manifest");
        let parsed =
            YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{rel}: not YAML: {e}"));
        let parsed: Vec<Yaml> = parsed.into_iter().filter(|d| !d.is_null()).collect();
        assert!(!parsed.is_empty(), "{rel}: no document");
        docs.extend(parsed.into_iter().map(|yaml| Doc {
            file: rel.clone(),
            yaml,
        }));
    }
    docs
}

fn string_map(y: &Yaml) -> BTreeMap<String, String> {
    y.as_hash()
        .map(|h| {
            h.iter()
                .map(|(k, v)| {
                    let value = match v {
                        Yaml::String(s) => s.clone(),
                        other => panic!("label value {other:?} is not a string"),
                    };
                    (k.as_str().expect("label key").to_owned(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn list(y: &Yaml) -> &[Yaml] {
    y.as_vec().map(Vec::as_slice).unwrap_or(&[])
}

/// `selector` is not empty and every one of its labels is in `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn workloads(docs: &[Doc]) -> Vec<&Doc> {
    docs.iter()
        .filter(|d| WORKLOAD_KINDS.contains(&d.kind()))
        .collect()
}

fn pod_labels(workload: &Doc) -> BTreeMap<String, String> {
    string_map(&workload.yaml["spec"]["template"]["metadata"]["labels"])
}

fn pod_spec(workload: &Doc) -> &Yaml {
    &workload.yaml["spec"]["template"]["spec"]
}

/// The one workload whose pods `selector` selects.
fn selected<'a>(docs: &'a [Doc], selector: &BTreeMap<String, String>, by: &str) -> &'a Doc {
    let hits: Vec<&Doc> = workloads(docs)
        .into_iter()
        .filter(|w| selects(selector, &pod_labels(w)))
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{by}: selector {selector:?} selects {} workloads ({:?}), not one",
        hits.len(),
        hits.iter().map(|w| w.label()).collect::<Vec<_>>()
    );
    hits[0]
}

/// A configuration parsed from TOML text by sluice's own parser, then validated.
fn sluice_config(text: &str, what: &str) -> Config {
    let mut config = Config::default();
    file::apply_text(&mut config, text).unwrap_or_else(|e| panic!("{what}: {e}"));
    config.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
    config
}

/// The sluice configuration each ConfigMap carries, by ConfigMap name.
fn configmap_configs(docs: &[Doc]) -> BTreeMap<String, Config> {
    docs.iter()
        .filter(|d| d.kind() == "ConfigMap")
        .map(|d| {
            let text = d.yaml["data"]["sluice.toml"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: no data key sluice.toml", d.label()));
            (
                d.name().to_owned(),
                sluice_config(text, &format!("{} sluice.toml", d.label())),
            )
        })
        .collect()
}

/// The ConfigMap whose sluice.toml the workload's container reads (mounted where its
/// `--config` points).
fn config_of<'a>(workload: &Doc, configs: &'a BTreeMap<String, Config>) -> &'a Config {
    let spec = pod_spec(workload);
    let container = &spec["containers"][0];
    let config_path = list(&container["args"])
        .iter()
        .filter_map(Yaml::as_str)
        .find_map(|a| a.strip_prefix("--config="))
        .unwrap_or_else(|| panic!("{}: no --config=FILE argument", workload.label()));
    let mount = list(&container["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(config_path))
        .unwrap_or_else(|| panic!("{}: nothing mounted at {config_path}", workload.label()));
    let volume_name = mount["name"].as_str().expect("mount name");
    let volume = list(&spec["volumes"])
        .iter()
        .find(|v| v["name"].as_str() == Some(volume_name))
        .unwrap_or_else(|| panic!("{}: no volume {volume_name}", workload.label()));
    let map = volume["configMap"]["name"].as_str().unwrap_or_else(|| {
        panic!(
            "{}: volume {volume_name} is not a ConfigMap",
            workload.label()
        )
    });
    configs.get(map).unwrap_or_else(|| {
        panic!(
            "{}: ConfigMap {map} is not in the manifests",
            workload.label()
        )
    })
}

#[test]
fn every_document_names_its_api_version_kind_and_name() {
    let docs = documents();
    for d in &docs {
        for key in ["apiVersion", "kind"] {
            assert!(
                d.yaml[key].as_str().is_some_and(|s| !s.is_empty()),
                "{}: a document without {key}",
                d.file
            );
        }
        assert!(!d.name().is_empty(), "{}: no metadata.name", d.label());
    }
    for kind in [
        "Kustomization",
        "StatefulSet",
        "Service",
        "ConfigMap",
        "PodDisruptionBudget",
    ] {
        assert!(
            docs.iter().any(|d| d.kind() == kind),
            "the manifests have no {kind}"
        );
    }
}

#[test]
fn the_kustomization_lists_every_manifest() {
    let docs = documents();
    let kustomizations: Vec<&Doc> = docs
        .iter()
        .filter(|d| d.kind() == "Kustomization")
        .collect();
    assert_eq!(kustomizations.len(), 1, "one kustomization.yaml");
    let listed: Vec<&str> = list(&kustomizations[0].yaml["resources"])
        .iter()
        .map(|r| r.as_str().expect("resource path"))
        .collect();
    let mut files: Vec<&str> = docs
        .iter()
        .filter(|d| d.kind() != "Kustomization")
        .map(|d| d.file.as_str())
        .collect();
    files.dedup();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted, files,
        "kustomization.yaml resources vs the files beside it"
    );
}

#[test]
fn services_and_disruption_budgets_select_one_workload() {
    let docs = documents();
    for w in workloads(&docs) {
        let selector = string_map(&w.yaml["spec"]["selector"]["matchLabels"]);
        assert!(
            selects(&selector, &pod_labels(w)),
            "{}: spec.selector {selector:?} does not select its own pod template",
            w.label()
        );
    }
    let mut services = 0;
    for s in docs.iter().filter(|d| d.kind() == "Service") {
        services += 1;
        let selector = string_map(&s.yaml["spec"]["selector"]);
        let workload = selected(&docs, &selector, &s.label());
        let declared = container_ports(workload);
        for port in list(&s.yaml["spec"]["ports"]) {
            let target = &port["targetPort"];
            assert!(
                declared.iter().any(|(name, number)| match target {
                    Yaml::String(t) => t == name,
                    Yaml::Integer(n) => n == number,
                    _ => false,
                }),
                "{}: targetPort {target:?} is not a port of {}",
                s.label(),
                workload.label()
            );
        }
    }
    assert!(services >= 2, "a client and a headless Service at least");
    // Each StatefulSet's governing Service exists and is headless.
    for w in workloads(&docs)
        .into_iter()
        .filter(|w| w.kind() == "StatefulSet")
    {
        let governing = w.yaml["spec"]["serviceName"].as_str().expect("serviceName");
        let service = docs
            .iter()
            .find(|d| d.kind() == "Service" && d.name() == governing)
            .unwrap_or_else(|| panic!("{}: serviceName {governing} is not a Service", w.label()));
        assert_eq!(
            service.yaml["spec"]["clusterIP"].as_str(),
            Some("None"),
            "{} is not headless",
            service.label()
        );
    }
    let budgets: Vec<&Doc> = docs
        .iter()
        .filter(|d| d.kind() == "PodDisruptionBudget")
        .collect();
    let mut covered: Vec<&str> = budgets
        .iter()
        .map(|b| {
            let selector = string_map(&b.yaml["spec"]["selector"]["matchLabels"]);
            selected(&docs, &selector, &b.label()).name()
        })
        .collect();
    covered.sort_unstable();
    let mut all: Vec<&str> = workloads(&docs).iter().map(|w| w.name()).collect();
    all.sort_unstable();
    assert_eq!(covered, all, "one PodDisruptionBudget per workload");
}

/// (name, containerPort) of every port of the workload's containers.
fn container_ports(workload: &Doc) -> Vec<(String, i64)> {
    list(&pod_spec(workload)["containers"])
        .iter()
        .flat_map(|c| list(&c["ports"]))
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("").to_owned(),
                p["containerPort"].as_i64().expect("containerPort"),
            )
        })
        .collect()
}

#[test]
fn probes_reach_the_management_api_as_a_user_it_admits() {
    let docs = documents();
    let configs = configmap_configs(&docs);
    for w in workloads(&docs) {
        let config = config_of(w, &configs);
        let listen: SocketAddr = config
            .http
            .listen
            .unwrap_or_else(|| panic!("{}: its configuration turns management off", w.label()));
        assert!(
            listen.ip().is_unspecified(),
            "{}: management listens on {listen}: the kubelet's probes come from outside the pod",
            w.label()
        );
        for container in list(&pod_spec(w)["containers"]) {
            let ports: Vec<(String, i64)> = list(&container["ports"])
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or("").to_owned(),
                        p["containerPort"].as_i64().expect("containerPort"),
                    )
                })
                .collect();
            assert!(
                container["resources"]["limits"]["memory"]
                    .as_str()
                    .is_some(),
                "{}: no memory limit (sluice sizes its watermark from it)",
                w.label()
            );
            for probe_key in PROBES {
                let probe = &container[probe_key];
                let get = &probe["httpGet"];
                assert!(
                    !get.is_badvalue(),
                    "{}: no {probe_key} with httpGet",
                    w.label()
                );
                let port = match &get["port"] {
                    Yaml::String(name) => ports.iter().find(|(n, _)| n == name),
                    Yaml::Integer(n) => ports.iter().find(|(_, p)| p == n),
                    other => panic!("{}: {probe_key} port {other:?}", w.label()),
                }
                .unwrap_or_else(|| {
                    panic!(
                        "{}: {probe_key} port {:?} is not declared by the container",
                        w.label(),
                        get["port"]
                    )
                });
                assert_eq!(
                    port.1,
                    i64::from(listen.port()),
                    "{}: {probe_key} targets port {}, management listens on {listen}",
                    w.label(),
                    port.1
                );
                let path = get["path"].as_str().expect("probe path");
                assert!(
                    HEALTH_PATHS.contains(&path),
                    "{}: {probe_key} path {path} is not one of {HEALTH_PATHS:?}",
                    w.label()
                );
                let header = list(&get["httpHeaders"])
                    .iter()
                    .find(|h| h["name"].as_str() == Some("Authorization"))
                    .and_then(|h| h["value"].as_str())
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: {probe_key} sends no Authorization (the API needs basic auth)",
                            w.label()
                        )
                    });
                let encoded = header.strip_prefix("Basic ").expect("basic auth");
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .expect("base64");
                let decoded = String::from_utf8(decoded).expect("utf-8");
                let (user, password) = decoded.split_once(':').expect("user:password");
                let admitted = config
                    .authenticate(user, password.as_bytes())
                    .unwrap_or_else(|| {
                        panic!("{}: {probe_key}'s user {user} does not log in", w.label())
                    });
                assert!(
                    admitted.may_use_management(),
                    "{}: {probe_key}'s user {user} may not use the management API",
                    w.label()
                );
                assert!(
                    !config.loopback_users.iter().any(|u| u == user),
                    "{}: {user} is a loopback-only user",
                    w.label()
                );
            }
        }
    }
}

/// The Service and port a URI host names: `name`, `name.NAMESPACE.svc` or
/// `name.NAMESPACE.svc.cluster.local`.
fn service_of(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

fn query_value<'a>(uri: &'a str, key: &str) -> Option<&'a str> {
    let query = uri.split_once('?')?.1;
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

#[test]
fn relays_dial_a_service_of_the_manifests_with_mounted_certificates() {
    let docs = documents();
    let configs = configmap_configs(&docs);
    let mut relays = 0;
    for w in workloads(&docs) {
        let config = config_of(w, &configs);
        if !config.federation.is_enabled() {
            continue;
        }
        relays += 1;
        // node_name from the pod name: each replica is a distinct node of the tree.
        let container = &pod_spec(w)["containers"][0];
        assert!(
            list(&container["args"])
                .iter()
                .any(|a| a.as_str() == Some("--node-name=$(POD_NAME)")),
            "{}: node_name is not the pod name",
            w.label()
        );
        let pod_name = list(&container["env"])
            .iter()
            .find(|e| e["name"].as_str() == Some("POD_NAME"))
            .unwrap_or_else(|| panic!("{}: no POD_NAME env", w.label()));
        assert_eq!(
            pod_name["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            Some("metadata.name"),
            "{}: POD_NAME is not the downward API's metadata.name",
            w.label()
        );
        let mounts: Vec<&str> = list(&container["volumeMounts"])
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .collect();
        for upstream in &config.federation.upstreams {
            for uri in &upstream.uris {
                let parsed = AmqpUrl::parse(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
                let name = service_of(&parsed.host);
                let service = docs
                    .iter()
                    .find(|d| d.kind() == "Service" && d.name() == name)
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: upstream host {} is not a Service of the manifests",
                            w.label(),
                            parsed.host
                        )
                    });
                assert!(
                    list(&service.yaml["spec"]["ports"])
                        .iter()
                        .any(|p| p["port"].as_i64() == Some(i64::from(parsed.port))),
                    "{}: {} has no port {}",
                    w.label(),
                    service.label(),
                    parsed.port
                );
                assert_ne!(
                    selected(
                        &docs,
                        &string_map(&service.yaml["spec"]["selector"]),
                        &service.label()
                    )
                    .name(),
                    w.name(),
                    "{}: federates from itself",
                    w.label()
                );
                if parsed.tls {
                    for key in ["cacertfile", "certfile", "keyfile"] {
                        let file = query_value(uri, key)
                            .unwrap_or_else(|| panic!("{}: amqps URI without {key}", w.label()));
                        assert!(
                            mounts.iter().any(|m| Path::new(file).starts_with(m)),
                            "{}: {key} {file} is under no volume mount ({mounts:?})",
                            w.label()
                        );
                    }
                }
            }
        }
    }
    assert!(relays >= 1, "no workload federates an exchange");
}

#[test]
fn the_systemd_example_files_parse_and_fit_together() {
    let dir = root().join(FEDERATION);
    let mut configs = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("deploy/federation") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("name")
            .to_owned();
        configs.insert(stem, sluice_config(&text, &path.display().to_string()));
    }
    let root_config = configs.get("root").expect("deploy/federation/root.toml");
    let relay = configs.get("relay").expect("deploy/federation/relay.toml");
    assert!(
        !root_config.federation.is_enabled(),
        "the root federates nothing"
    );
    assert!(relay.federation.is_enabled(), "the relay federates");
    assert_ne!(
        root_config.node_name, relay.node_name,
        "node names are unique"
    );
    // The relay logs in as the user its certificate names, which is its node name.
    assert!(
        root_config.users.iter().any(|u| u.name == relay.node_name),
        "the root has no user {}",
        relay.node_name
    );
    assert!(
        root_config.tls.verify_peer,
        "the root verifies the relays' certificates"
    );
    let tls_port = root_config
        .tls
        .listen
        .first()
        .expect("a TLS listener")
        .port();
    for uri in &relay.federation.upstreams[0].uris {
        let parsed = AmqpUrl::parse(uri).expect("upstream URI");
        assert!(parsed.tls, "{uri}: not amqps");
        assert_eq!(parsed.port, tls_port, "{uri}: not the root's TLS port");
        assert_eq!(query_value(uri, "auth_mechanism"), Some("external"));
    }
    assert_eq!(relay.federation.upstreams_of("/", "amq.topic").len(), 1);
}

#[test]
fn kubectl_builds_and_accepts_the_manifests() {
    let dir = root().join(KUBERNETES);
    let built = match Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: kubectl is not installed ({e})");
            return;
        }
    };
    assert!(
        built.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let text = String::from_utf8(built.stdout).expect("utf-8");
    let rendered = YamlLoader::load_from_str(&text).expect("kustomize output is YAML");
    let sources = documents()
        .iter()
        .filter(|d| d.kind() != "Kustomization")
        .count();
    assert_eq!(
        rendered.len(),
        sources,
        "kustomize rendered every document once"
    );
    assert!(
        rendered
            .iter()
            .filter(|d| d["kind"].as_str() != Some("Namespace"))
            .all(|d| d["metadata"]["namespace"].as_str() == Some("sluice")),
        "every namespaced object lands in the namespace the certificates name"
    );
    let server = Command::new("kubectl")
        .args(["version", "--request-timeout=5s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !server {
        eprintln!("skipped: kubectl apply --dry-run=client needs an API server, and none answers");
        return;
    }
    // The cluster resolves every kind; cert-manager's only where it is installed.
    let cert_manager = Command::new("kubectl")
        .args(["api-resources", "--api-group=cert-manager.io", "-o", "name"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success() && !out.stdout.is_empty());
    let manifests: String = if cert_manager {
        text
    } else {
        eprintln!("note: cert-manager is not installed: certificates.yaml is not dry-run");
        text.split("\n---\n")
            .filter(|doc| !doc.contains("apiVersion: cert-manager.io/"))
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let mut apply = Command::new("kubectl")
        .args(["apply", "--dry-run=client", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl apply");
    {
        use std::io::Write;
        let mut stdin = apply.stdin.take().expect("stdin");
        stdin
            .write_all(manifests.as_bytes())
            .expect("write manifests");
    }
    let out = apply.wait_with_output().expect("kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply --dry-run=client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
