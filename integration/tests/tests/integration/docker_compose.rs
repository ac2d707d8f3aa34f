//! docker-compose.yml is checked with a YAML parser: the services the guide
//! promises, pinned images, health checks, loopback-only ports, and clusters
//! whose members agree on each other. The URLs of docs/deploying.md must point at ports
//! the file publishes. (scripts/compose-test.sh also runs its etcd and
//! ZooKeeper services for real.)

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const COMPOSE_FILE: &str = include_str!("../../../../docker-compose.yml");
const README: &str = include_str!("../../../../docs/deploying.md");
const VERSIONS: &str = include_str!("../../../../versions.env");
const ZOO_CFG: &str = include_str!("../../../../deploy/compose/zoo.cfg");

/// The file as docker compose reads it with no variables set but those of
/// versions.env (through the .env link): `${KEY}` and `${KEY:?message}` take
/// the value there, `${KEY:-default}` its default when versions.env lacks
/// KEY. Innermost first, since a default may hold another `${...}`.
fn compose() -> String {
    let mut text = COMPOSE_FILE.to_owned();
    while let Some(close) = text.find('}') {
        let start = text[..close].rfind("${").expect("a ${ before each }");
        let inner = &text[start + 2..close];
        let (key, default) = match inner.split_once(":-") {
            Some((key, default)) => (key, Some(default)),
            None => (inner.split(":?").next().unwrap(), None),
        };
        let value = VERSIONS
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .or(default)
            .unwrap_or_else(|| panic!("versions.env has no {key}"))
            .to_owned();
        text.replace_range(start..=close, &value);
    }
    text
}

const SERVICES: [&str; 11] = [
    "etcd1",
    "etcd2",
    "etcd3",
    "zk1",
    "zk2",
    "zk3",
    "kube-etcd",
    "kube-apiserver",
    "kube-init",
    "postgres",
    "postgres-standby",
];

/// kube-apiserver's image has no shell or client to probe itself with;
/// kube-init's health check (it reached /readyz and applied RBAC) covers it.
const WITHOUT_HEALTH_CHECK: [&str; 1] = ["kube-apiserver"];

/// Keys of the Compose specification this file may use; anything else is a
/// typo that Docker would reject.
const SERVICE_KEYS: [&str; 9] = [
    "image",
    "entrypoint",
    "command",
    "environment",
    "ports",
    "volumes",
    "healthcheck",
    "user",
    "depends_on",
];

fn parse(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("docker-compose.yml is valid YAML")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `--flag=value` from a command list.
fn flag(command: &[String], name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    command
        .iter()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

/// Every problem found; empty when the file is right.
fn problems(compose: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let Some(top) = compose.as_object() else {
        return vec!["the file is not a mapping".into()];
    };
    for key in top.keys() {
        if !["name", "services", "volumes", "networks"].contains(&key.as_str())
            && !key.starts_with("x-")
        {
            found.push(format!("unknown top-level key {key}"));
        }
    }
    let services = top
        .get("services")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let names: BTreeSet<&str> = services.keys().map(String::as_str).collect();
    if names != SERVICES.into_iter().collect() {
        found.push(format!("services are {names:?}, expected {SERVICES:?}"));
    }
    let declared: BTreeSet<String> = top
        .get("volumes")
        .and_then(Value::as_object)
        .map(|v| v.keys().cloned().collect())
        .unwrap_or_default();
    let mut host_ports = BTreeMap::new();
    for (name, service) in &services {
        check_service(name, service, &declared, &mut host_ports, &mut found);
    }
    check_etcd(&services, &host_ports, &mut found);
    check_zookeeper(&services, &mut found);
    check_kube(&services, &mut found);
    found
}

fn check_service(
    name: &str,
    service: &Value,
    declared: &BTreeSet<String>,
    host_ports: &mut BTreeMap<u16, String>,
    found: &mut Vec<String>,
) {
    let Some(fields) = service.as_object() else {
        return found.push(format!("{name}: not a mapping"));
    };
    for key in fields.keys() {
        if !SERVICE_KEYS.contains(&key.as_str()) {
            found.push(format!("{name}: unknown key {key}"));
        }
    }
    let image = fields.get("image").and_then(Value::as_str).unwrap_or("");
    match image.rsplit_once(':') {
        Some((_, tag))
            if tag != "latest" && tag.chars().any(|c| c.is_ascii_digit()) && !tag.contains('/') => {
        }
        _ => found.push(format!(
            "{name}: image {image:?} is not pinned to a version"
        )),
    }
    if !WITHOUT_HEALTH_CHECK.contains(&name) {
        check_health(name, fields.get("healthcheck"), found);
    }
    check_ports(name, fields, host_ports, found);
    check_volumes(name, fields, declared, found);
}

fn check_health(name: &str, health: Option<&Value>, found: &mut Vec<String>) {
    let test = health.map(|h| strings(&h["test"])).unwrap_or_default();
    if !matches!(test.first().map(String::as_str), Some("CMD" | "CMD-SHELL")) || test.len() < 2 {
        found.push(format!("{name}: no health check command"));
    }
    for key in ["interval", "timeout"] {
        let d = health.and_then(|h| h[key].as_str()).unwrap_or("");
        if !(d.ends_with('s') && d[..d.len().saturating_sub(1)].parse::<u32>().is_ok()) {
            found.push(format!("{name}: healthcheck {key} {d:?} is not like 5s"));
        }
    }
    if health.and_then(|h| h["retries"].as_u64()).is_none() {
        found.push(format!("{name}: healthcheck has no retries"));
    }
}

fn check_ports(
    name: &str,
    fields: &serde_json::Map<String, Value>,
    host_ports: &mut BTreeMap<u16, String>,
    found: &mut Vec<String>,
) {
    for port in strings(&fields.get("ports").cloned().unwrap_or_default()) {
        let parts: Vec<&str> = port.split(':').collect();
        match parts.as_slice() {
            ["127.0.0.1", host, container] if container.parse::<u16>().is_ok() => {
                match host.parse::<u16>() {
                    Ok(h) => {
                        if let Some(other) = host_ports.insert(h, name.to_owned()) {
                            found.push(format!(
                                "{name}: host port {h} is also published by {other}"
                            ));
                        }
                    }
                    Err(_) => found.push(format!("{name}: bad host port in {port:?}")),
                }
            }
            _ => found.push(format!(
                "{name}: port {port:?} is not 127.0.0.1:HOST:CONTAINER"
            )),
        }
    }
}

fn check_volumes(
    name: &str,
    fields: &serde_json::Map<String, Value>,
    declared: &BTreeSet<String>,
    found: &mut Vec<String>,
) {
    for volume in strings(&fields.get("volumes").cloned().unwrap_or_default()) {
        let source = volume.split(':').next().unwrap_or("");
        if !source.starts_with("./") && !declared.contains(source) {
            found.push(format!("{name}: volume {source:?} is not declared"));
        }
    }
}

fn check_etcd(
    services: &serde_json::Map<String, Value>,
    host_ports: &BTreeMap<u16, String>,
    found: &mut Vec<String>,
) {
    let members: Vec<(&String, Vec<String>)> = services
        .iter()
        .filter(|(n, _)| n.starts_with("etcd"))
        .map(|(n, s)| (n, strings(&s["command"])))
        .collect();
    let expected_cluster = members
        .iter()
        .map(|(n, _)| format!("{n}=http://{n}:2380"))
        .collect::<Vec<_>>()
        .join(",");
    for (name, command) in &members {
        if flag(command, "name").as_deref() != Some(name.as_str()) {
            found.push(format!("{name}: --name does not match the service name"));
        }
        if flag(command, "initial-cluster").as_deref() != Some(expected_cluster.as_str()) {
            found.push(format!(
                "{name}: --initial-cluster is not {expected_cluster}"
            ));
        }
        if flag(command, "initial-advertise-peer-urls") != Some(format!("http://{name}:2380")) {
            found.push(format!(
                "{name}: --initial-advertise-peer-urls does not name itself"
            ));
        }
        // Host clients follow the advertised URL, so it must be this member's published port.
        let advertised = flag(command, "advertise-client-urls").unwrap_or_default();
        let port = advertised
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok());
        if port.and_then(|p| host_ports.get(&p)) != Some(name) {
            found.push(format!(
                "{name}: advertised client URL {advertised:?} is not its published port"
            ));
        }
    }
}

fn check_zookeeper(services: &serde_json::Map<String, Value>, found: &mut Vec<String>) {
    let zk: Vec<(&String, &Value)> = services
        .iter()
        .filter(|(n, _)| n.starts_with("zk"))
        .collect();
    let expected: Vec<String> = zk
        .iter()
        .enumerate()
        .map(|(i, (n, _))| format!("server.{}={n}:2888:3888;2181", i + 1))
        .collect();
    let configured: Vec<&str> = ZOO_CFG
        .lines()
        .filter(|l| l.starts_with("server."))
        .collect();
    if configured != expected {
        found.push(format!(
            "deploy/compose/zoo.cfg lists {configured:?}, expected {expected:?}"
        ));
    }
    let mut ids = BTreeSet::new();
    for (name, service) in &zk {
        let env = &service["environment"];
        let id = env["ZOO_MY_ID"].as_str().unwrap_or("");
        if !ids.insert(id.to_owned()) || Some(id) != name.strip_prefix("zk") {
            found.push(format!("{name}: ZOO_MY_ID {id:?} is not its own number"));
        }
        let config = "./deploy/compose/zoo.cfg:/conf/zoo.cfg:ro";
        if !strings(&service["volumes"]).iter().any(|v| v == config) {
            found.push(format!("{name}: does not mount {config}"));
        }
    }
}

/// The control plane: kube-init writes the kubeconfig into a host
/// directory and waits for the apiserver; the apiserver publishes 6443,
/// reads the DEV ONLY key material and authorizes with RBAC.
fn check_kube(services: &serde_json::Map<String, Value>, found: &mut Vec<String>) {
    let init = &services.get("kube-init").cloned().unwrap_or_default();
    if !strings(&init["volumes"])
        .iter()
        .any(|v| v == "./.compose/kube:/out")
    {
        found.push("kube-init: the kubeconfig directory ./.compose/kube is not mounted".into());
    }
    if !strings(&init["volumes"])
        .iter()
        .any(|v| v == "./deploy/kubernetes:/rbac:ro")
    {
        found.push("kube-init: deploy/kubernetes (rbac.yaml) is not mounted".into());
    }
    let api = &services.get("kube-apiserver").cloned().unwrap_or_default();
    if !strings(&api["ports"])
        .iter()
        .any(|p| p == "127.0.0.1:6443:6443")
    {
        found.push("kube-apiserver: the API port 6443 is not published on 127.0.0.1".into());
    }
    let command = strings(&api["command"]);
    if flag(&command, "authorization-mode").as_deref() != Some("RBAC") {
        found.push("kube-apiserver: --authorization-mode is not RBAC".into());
    }
    if flag(&command, "etcd-servers").as_deref() != Some("http://kube-etcd:2379") {
        found.push("kube-apiserver: --etcd-servers is not the kube-etcd service".into());
    }
    for file in command
        .iter()
        .filter_map(|a| a.split_once("=/pki/").map(|(_, f)| f))
    {
        if !std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/compose/kube")
            .join(file)
            .is_file()
        {
            found.push(format!(
                "kube-apiserver: /pki/{file} is not in deploy/compose/kube"
            ));
        }
    }
}

#[test]
fn the_compose_file_is_well_formed() {
    let found = problems(&parse(&compose()));
    assert!(
        found.is_empty(),
        "docker-compose.yml:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_checks_catch_broken_files() {
    let zookeeper = format!("zookeeper:{}", fencing_harness::cache::zookeeper_release());
    let broken = compose()
        .replacen(&zookeeper, "zookeeper:latest", 1)
        .replacen("\"127.0.0.1:22379:2379\"", "\"127.0.0.1:2379:2379\"", 1)
        .replacen("ZOO_MY_ID: \"3\"", "ZOO_MY_ID: \"1\"", 1)
        .replacen(
            "    user: \"0:0\"\n",
            "    user: \"0:0\"\n    healtcheck: {}\n",
            1,
        )
        .replacen(
            "--authorization-mode=RBAC",
            "--authorization-mode=AlwaysAllow",
            1,
        )
        .replacen("/pki/tokens.csv", "/pki/token.csv", 1)
        .replacen(
            "--initial-cluster=etcd1=http://etcd1:2380,etcd2",
            "--initial-cluster=etcd1=http://etcd1:2380,etcdX",
            1,
        )
        .replacen(
            "./deploy/compose/zoo.cfg:/conf/zoo.cfg:ro",
            "./zoo.cfg:/conf",
            1,
        );
    let found = problems(&parse(&broken)).join("\n");
    for expected in [
        "zk1: image \"zookeeper:latest\" is not pinned",
        "etcd2: host port 2379 is also published by etcd1",
        "zk3: ZOO_MY_ID",
        "kube-init: unknown key healtcheck",
        "kube-apiserver: --authorization-mode is not RBAC",
        "kube-apiserver: /pki/token.csv is not in deploy/compose/kube",
        "etcd1: --initial-cluster",
        "zk1: does not mount ./deploy/compose/zoo.cfg",
    ] {
        assert!(found.contains(expected), "missed {expected:?} in:\n{found}");
    }
    assert!(problems(&parse("services: {}\n"))
        .iter()
        .any(|p| p.starts_with("services are")));
}

#[test]
fn the_readme_points_at_ports_the_file_publishes() {
    let compose = parse(&compose());
    let published: BTreeSet<String> = compose["services"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|s| strings(&s["ports"]))
        .filter_map(|p| p.split(':').nth(1).map(str::to_owned))
        .collect();
    let section = README
        .split("## Clusters with Docker Compose")
        .nth(1)
        .expect("docs/deploying.md has a 'Clusters with Docker Compose' section");
    let mut urls = 0;
    for scheme in ["etcd://", "zk://"] {
        for start in section.match_indices(scheme).map(|(i, _)| i + scheme.len()) {
            let hosts = section[start..].split('/').next().unwrap();
            for host in hosts.split(',') {
                let port = host.rsplit(':').next().unwrap();
                assert!(
                    published.contains(port),
                    "README uses {host}, which docker-compose.yml does not publish"
                );
            }
            urls += 1;
        }
    }
    assert!(
        urls >= 2,
        "the README section shows an etcd and a ZooKeeper URL"
    );
    assert!(section.contains("kube://my-app?kubeconfig=.compose/kube/kubeconfig.yaml"));
}

#[test]
fn the_images_are_the_releases_the_suite_runs() {
    let link = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.env");
    assert_eq!(
        std::fs::read_link(&link).expect(".env is a link"),
        std::path::Path::new("versions.env"),
        "docker compose reads .env: it must be versions.env"
    );
    let compose = parse(&compose());
    for (service, expected) in [
        (
            "etcd1",
            format!(
                "quay.io/coreos/etcd:v{}",
                fencing_harness::cache::etcd_release()
            ),
        ),
        (
            "zk1",
            format!("zookeeper:{}", fencing_harness::cache::zookeeper_release()),
        ),
        (
            "kube-apiserver",
            format!(
                "registry.k8s.io/kube-apiserver:v{}",
                fencing_harness::cache::kubernetes_release()
            ),
        ),
    ] {
        assert_eq!(
            compose["services"][service]["image"].as_str(),
            Some(expected.as_str())
        );
    }
    // Each image can be replaced (the test command's local stand-ins).
    let raw = parse(COMPOSE_FILE);
    for (prefix, variable) in [
        ("etcd", "FENCING_ETCD_IMAGE"),
        ("kube-etcd", "FENCING_ETCD_IMAGE"),
        ("zk", "FENCING_ZOOKEEPER_IMAGE"),
        ("kube-apiserver", "FENCING_KUBE_APISERVER_IMAGE"),
        ("kube-init", "FENCING_CURL_IMAGE"),
    ] {
        for (name, service) in raw["services"].as_object().unwrap() {
            let image = service["image"].as_str().unwrap_or("");
            assert!(
                !name.starts_with(prefix) || image.starts_with(&format!("${{{variable}:-")),
                "{name}: image {image:?} cannot be replaced through {variable}"
            );
        }
    }
    assert!(
        !COMPOSE_FILE.contains(fencing_harness::cache::etcd_release()),
        "docker-compose.yml names the etcd release itself instead of reading versions.env"
    );
}
