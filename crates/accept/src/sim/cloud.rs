//! A simulated OpenStack on one loopback port: Keystone v3, Nova v2.1 and Neutron v2.0, as far as
//! OCCM's InstancesV2 and its start-up reach into them. Everything else answers 404 and is kept
//! as an unknown request, so that a gap in the simulation shows in the report instead of passing
//! silently.
//!
//! What is served, and where in upstream each request comes from (cloud-provider-openstack
//! v1.34.1, gophercloud v2):
//! - `POST /identity/v3/auth/tokens`: password authentication at start-up (`NewOpenStack`,
//!   pkg/openstack/openstack.go); answers 201 with `X-Subject-Token` and a token carrying the
//!   catalog (Keystone API v3 "Password authentication with scoped authorization").
//! - Version documents at `/identity/`, `/compute/`, `/network/` and below: the endpoint
//!   discovery the clients do before their first call.
//! - `GET /compute/v2.1/servers/detail?name=^<node>$`: a Node without a provider ID
//!   (`getServerByName`, pkg/openstack/instances.go L185); the name is a regular expression, as
//!   in Nova.
//! - `GET /compute/v2.1/servers/<id>`: a Node with a provider ID (`getInstance`, L175); an
//!   unknown id answers Nova's 404 `itemNotFound`.
//! - `GET /compute/v2.1/flavors/<id>`: instance type when the server carries no `original_name`
//!   (`srvInstanceType`, L257).
//! - `GET /network/v2.0/ports?device_id=<id>`: the server's ports for its addresses
//!   (`getAttachedPorts`, L238); `GET /network/v2.0/networks/<id>` and `ports/<id>` for trunk
//!   subports (pkg/openstack/instances_addresses.go).
//! - `GET /network/v2.0/extensions`: `Routes()` (openstack.go L395); the list has no
//!   `extraroute`, so OCCM does not claim Routes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::{Value, json};

/// The user name the simulated Keystone accepts.
pub const USERNAME: &str = "occm";
/// The password the simulated Keystone accepts.
pub const PASSWORD: &str = "occm-forge-accept";
/// The project the token is scoped to.
pub const PROJECT: &str = "accept";
/// The region of every catalog endpoint.
pub const REGION: &str = "RegionOne";
/// The token the simulated Keystone issues (`X-Subject-Token`).
pub const TOKEN: &str = "gAAAAAccept-occm-forge-token";

/// One Nova server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Server {
    /// Server UUID; OCCM makes the provider ID `openstack:///<id>` of it.
    pub id: String,
    /// Server name; OCCM looks a Node without provider ID up by this name.
    pub name: String,
    /// Nova status, e.g. `ACTIVE`, `SHUTOFF`.
    pub status: String,
    /// Fixed IPv4 address on the network `private` (one ACTIVE Neutron port carries it).
    pub fixed_ip: String,
    /// Flavor name (`flavor.original_name`, microversion ≥ 2.47).
    pub flavor: String,
    /// `OS-EXT-AZ:availability_zone`.
    pub availability_zone: String,
}

impl Server {
    /// An ACTIVE `m1.small` server in zone `nova`.
    pub fn active(id: &str, name: &str, fixed_ip: &str) -> Self {
        Server {
            id: id.to_string(),
            name: name.to_string(),
            status: "ACTIVE".to_string(),
            fixed_ip: fixed_ip.to_string(),
            flavor: "m1.small".to_string(),
            availability_zone: "nova".to_string(),
        }
    }
}

/// What the cloud looks like during one scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloudState {
    /// Whether the token's catalog lists the `compute` service. Without it OCCM's
    /// `InstancesV2()` cannot build its compute client (the production failure of
    /// vexxhost/atmosphere#4240).
    pub compute_in_catalog: bool,
    /// How many of the next tokens are issued without the `compute` service even when
    /// `compute_in_catalog` is true: the transient fault of the bug report (the first token
    /// after a Keystone restart, or a catalog being updated, lacks the endpoint). Counts down
    /// with each token issued.
    pub tokens_without_compute: u32,
    /// The servers Nova knows.
    pub servers: Vec<Server>,
}

impl Default for CloudState {
    fn default() -> Self {
        CloudState {
            compute_in_catalog: true,
            tokens_without_compute: 0,
            servers: Vec::new(),
        }
    }
}

/// One request the simulated cloud received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path and query, e.g. `/compute/v2.1/servers/detail?name=%5Estale-1%24`.
    pub uri: String,
    /// Status answered.
    pub status: u16,
    /// True when no route matched: a gap in the simulation (answered 404).
    pub unknown: bool,
}

impl std::fmt::Display for RecordedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} → {}", self.method, self.uri, self.status)?;
        if self.unknown {
            write!(f, " (not simulated)")?;
        }
        Ok(())
    }
}

struct Shared {
    base: String,
    state: Mutex<CloudState>,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// Marks a response of the fallback route (no route matched).
#[derive(Clone, Copy)]
struct Unrouted;

/// The running simulated OpenStack; stops when dropped.
pub struct SimulatedCloud {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl SimulatedCloud {
    /// Starts the simulated cloud on a free loopback port, with `CloudState::default()`.
    ///
    /// Errors: the port cannot be bound.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            base: format!("http://{addr}"),
            state: Mutex::new(CloudState::default()),
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/identity", get(identity_versions))
            .route("/identity/", get(identity_versions))
            .route("/identity/v3", get(identity_v3))
            .route("/identity/v3/", get(identity_v3))
            .route("/identity/v3/auth/tokens", post(issue_token))
            .route("/compute", get(compute_versions))
            .route("/compute/", get(compute_versions))
            .route("/compute/v2.1", get(compute_v21))
            .route("/compute/v2.1/", get(compute_v21))
            .route("/compute/v2.1/servers", get(list_servers))
            .route("/compute/v2.1/servers/detail", get(list_servers_detail))
            .route("/compute/v2.1/servers/{id}", get(get_server))
            .route("/compute/v2.1/flavors/{id}", get(get_flavor))
            .route("/network", get(network_versions))
            .route("/network/", get(network_versions))
            .route("/network/v2.0", get(network_v20))
            .route("/network/v2.0/", get(network_v20))
            .route("/network/v2.0/extensions", get(network_extensions))
            .route("/network/v2.0/ports", get(list_ports))
            .route("/network/v2.0/ports/{id}", get(get_port))
            .route("/network/v2.0/networks/{id}", get(get_network))
            .fallback(unrouted)
            .layer(middleware::from_fn_with_state(shared.clone(), record))
            .with_state(shared.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(SimulatedCloud {
            addr,
            shared,
            shutdown: Some(tx),
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        self.shared.base.clone()
    }

    /// The Keystone v3 URL for cloud.conf `auth-url`.
    pub fn auth_url(&self) -> String {
        format!("{}/identity/v3", self.shared.base)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the cloud's state and clears the request log (one scenario run begins).
    pub fn set_state(&self, state: CloudState) {
        *self.shared.state.lock().expect("cloud state lock") = state;
        self.shared
            .requests
            .lock()
            .expect("request log lock")
            .clear();
    }

    /// Makes the next `n` Keystone tokens come without the compute endpoint, keeping the servers
    /// and the request log (a fault that strikes a running cloud).
    pub fn fail_next_tokens(&self, n: u32) {
        self.shared
            .state
            .lock()
            .expect("cloud state lock")
            .tokens_without_compute = n;
    }

    /// Adds `server` to Nova (a server an infrastructure provider created).
    pub fn add_server(&self, server: Server) {
        self.shared
            .state
            .lock()
            .expect("cloud state lock")
            .servers
            .push(server);
    }

    /// Removes the server `id` from Nova (it was deleted); true when it was there.
    pub fn remove_server(&self, id: &str) -> bool {
        let mut st = self.shared.state.lock().expect("cloud state lock");
        let before = st.servers.len();
        st.servers.retain(|s| s.id != id);
        st.servers.len() != before
    }

    /// The servers Nova knows now.
    pub fn servers(&self) -> Vec<Server> {
        self.shared
            .state
            .lock()
            .expect("cloud state lock")
            .servers
            .clone()
    }

    /// Every request received since the last [`SimulatedCloud::set_state`], in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .expect("request log lock")
            .clone()
    }

    /// The cloud.conf (gcfg/INI) that points OCCM at this cloud: `[Global]` password
    /// credentials and region, `[LoadBalancer] enabled=false` (no Octavia is simulated; the
    /// service controller is then skipped, as upstream's `LoadBalancer()` returns false).
    pub fn cloud_conf(&self) -> String {
        format!(
            "[Global]\nauth-url={}\nusername={USERNAME}\npassword={PASSWORD}\nuser-domain-name=Default\nproject-name={PROJECT}\nproject-domain-name=Default\nregion={REGION}\n\n[LoadBalancer]\nenabled=false\n",
            self.auth_url()
        )
    }
}

impl Drop for SimulatedCloud {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

async fn record(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let uri = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_else(|| req.uri().path().to_string());
    let response = next.run(req).await;
    let unknown = response.extensions().get::<Unrouted>().is_some();
    let status = response.status().as_u16();
    tracing::debug!("simulated OpenStack: {method} {uri} → {status}");
    shared
        .requests
        .lock()
        .expect("request log lock")
        .push(RecordedRequest {
            method,
            uri,
            status,
            unknown,
        });
    response
}

async fn unrouted() -> Response {
    let mut r = (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"code": 404, "message": "not simulated by occm-forge accept"}})),
    )
        .into_response();
    r.extensions_mut().insert(Unrouted);
    r
}

fn state(shared: &Shared) -> CloudState {
    shared.state.lock().expect("cloud state lock").clone()
}

async fn identity_versions(State(s): State<Arc<Shared>>) -> Response {
    (
        StatusCode::MULTIPLE_CHOICES,
        Json(json!({"versions": {"values": [identity_version(&s.base)]}})),
    )
        .into_response()
}

async fn identity_v3(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({"version": identity_version(&s.base)}))
}

fn identity_version(base: &str) -> Value {
    json!({
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{base}/identity/v3/")}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]
    })
}

/// Keystone v3 password authentication: 201, `X-Subject-Token`, and the token with its catalog.
/// Wrong credentials answer 401 as Keystone does.
async fn issue_token(State(s): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let user = &body["auth"]["identity"]["password"]["user"];
    if user["name"] != USERNAME || user["password"] != PASSWORD {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}})),
        )
            .into_response();
    }
    let with_compute = {
        let mut st = s.state.lock().expect("cloud state lock");
        if st.tokens_without_compute > 0 {
            st.tokens_without_compute -= 1;
            false
        } else {
            st.compute_in_catalog
        }
    };
    let base = &s.base;
    let endpoint = |id: &str, url: String| json!({"id": id, "interface": "public", "region": REGION, "region_id": REGION, "url": url});
    let mut catalog = vec![
        json!({"id": "svc-identity", "type": "identity", "name": "keystone",
               "endpoints": [endpoint("ep-identity", format!("{base}/identity"))]}),
        json!({"id": "svc-network", "type": "network", "name": "neutron",
               "endpoints": [endpoint("ep-network", format!("{base}/network"))]}),
    ];
    if with_compute {
        catalog.push(
            json!({"id": "svc-compute", "type": "compute", "name": "nova",
            "endpoints": [endpoint("ep-compute", format!("{base}/compute/v2.1"))]}),
        );
    }
    let domain = json!({"id": "default", "name": "Default"});
    let token = json!({"token": {
        "methods": ["password"],
        "issued_at": "2026-01-01T00:00:00.000000Z",
        "expires_at": "2099-12-31T23:59:59.000000Z",
        "user": {"id": "user-occm", "name": USERNAME, "domain": domain, "password_expires_at": null},
        "project": {"id": "project-accept", "name": PROJECT, "domain": domain},
        "roles": [{"id": "role-member", "name": "member"}],
        "catalog": catalog
    }});
    let mut headers = HeaderMap::new();
    headers.insert(
        "X-Subject-Token",
        TOKEN.parse().expect("static header value"),
    );
    (StatusCode::CREATED, headers, Json(token)).into_response()
}

async fn compute_versions(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({"versions": [compute_version(&s.base)]}))
}

async fn compute_v21(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({"version": compute_version(&s.base)}))
}

fn compute_version(base: &str) -> Value {
    json!({
        "id": "v2.1", "status": "CURRENT", "version": "2.96", "min_version": "2.1",
        "updated": "2013-07-23T11:33:21Z",
        "links": [{"rel": "self", "href": format!("{base}/compute/v2.1/")}]
    })
}

fn server_json(base: &str, srv: &Server, index: usize) -> Value {
    json!({
        "id": srv.id,
        "name": srv.name,
        "status": srv.status,
        "tenant_id": "project-accept",
        "user_id": "user-occm",
        "hostId": "host-accept",
        "created": "2026-01-01T00:00:00Z",
        "updated": "2026-01-01T00:00:00Z",
        "accessIPv4": "",
        "accessIPv6": "",
        "addresses": {"private": [{
            "version": 4, "addr": srv.fixed_ip,
            "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": mac(index)
        }]},
        "flavor": {"original_name": srv.flavor, "vcpus": 1, "ram": 2048, "disk": 20,
                   "ephemeral": 0, "swap": 0, "extra_specs": {}},
        "image": {"id": "image-accept"},
        "metadata": {},
        "key_name": null,
        "OS-EXT-AZ:availability_zone": srv.availability_zone,
        "OS-EXT-STS:vm_state": srv.status.to_lowercase(),
        "OS-EXT-STS:power_state": if srv.status == "ACTIVE" { 1 } else { 4 },
        "OS-EXT-STS:task_state": null,
        "security_groups": [{"name": "default"}],
        "os-extended-volumes:volumes_attached": [],
        "links": [{"rel": "self", "href": format!("{base}/compute/v2.1/servers/{}", srv.id)}]
    })
}

fn mac(index: usize) -> String {
    format!("fa:16:3e:00:00:{:02x}", (index + 1) % 256)
}

fn matching(st: &CloudState, q: &HashMap<String, String>) -> Vec<(usize, Server)> {
    // Nova filters `name` as a regular expression (nova/db/main/api.py, regexp filter).
    let re = q.get("name").map(|n| regex::Regex::new(n));
    st.servers
        .iter()
        .enumerate()
        .filter(|(_, s)| match &re {
            None => true,
            Some(Ok(re)) => re.is_match(&s.name),
            Some(Err(_)) => false,
        })
        .map(|(i, s)| (i, s.clone()))
        .collect()
}

async fn list_servers_detail(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Json<Value> {
    let st = state(&s);
    let servers: Vec<Value> = matching(&st, &q)
        .iter()
        .map(|(i, srv)| server_json(&s.base, srv, *i))
        .collect();
    Json(json!({"servers": servers}))
}

async fn list_servers(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Json<Value> {
    let st = state(&s);
    let servers: Vec<Value> = matching(&st, &q)
        .iter()
        .map(|(_, srv)| json!({"id": srv.id, "name": srv.name, "links": []}))
        .collect();
    Json(json!({"servers": servers}))
}

async fn get_server(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let st = state(&s);
    match st.servers.iter().enumerate().find(|(_, srv)| srv.id == id) {
        Some((i, srv)) => Json(json!({"server": server_json(&s.base, srv, i)})).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"itemNotFound": {"code": 404, "message": format!("Instance {id} could not be found.")}})),
        )
            .into_response(),
    }
}

async fn get_flavor(Path(id): Path<String>) -> Json<Value> {
    Json(json!({"flavor": {"id": id, "name": "m1.small", "vcpus": 1, "ram": 2048, "disk": 20}}))
}

async fn network_versions(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({"versions": [network_version(&s.base)]}))
}

async fn network_v20(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({"resources": [], "version": network_version(&s.base)}))
}

fn network_version(base: &str) -> Value {
    json!({
        "id": "v2.0", "status": "CURRENT",
        "links": [{"rel": "self", "href": format!("{base}/network/v2.0/")}]
    })
}

async fn network_extensions() -> Json<Value> {
    let ext = |alias: &str, name: &str| json!({"alias": alias, "name": name, "description": name, "updated": "2013-01-01T00:00:00-00:00", "links": []});
    Json(json!({"extensions": [
        ext("security-group", "security-group"),
        ext("port-security", "Port Security"),
        ext("allowed-address-pairs", "Allowed Address Pairs"),
    ]}))
}

fn port_json(srv: &Server, index: usize) -> Value {
    json!({
        "id": format!("port-{}", srv.id),
        "name": "",
        "network_id": "network-private",
        "tenant_id": "project-accept",
        "project_id": "project-accept",
        "device_id": srv.id,
        "device_owner": "compute:nova",
        "status": "ACTIVE",
        "admin_state_up": true,
        "mac_address": mac(index),
        "fixed_ips": [{"subnet_id": "subnet-private", "ip_address": srv.fixed_ip}],
        "allowed_address_pairs": [],
        "security_groups": ["security-group-default"],
        "tags": []
    })
}

async fn list_ports(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Json<Value> {
    let st = state(&s);
    let ports: Vec<Value> = st
        .servers
        .iter()
        .enumerate()
        .filter(|(_, srv)| q.get("device_id").is_none_or(|d| *d == srv.id))
        .map(|(i, srv)| port_json(srv, i))
        .collect();
    Json(json!({"ports": ports}))
}

async fn get_port(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let st = state(&s);
    match st
        .servers
        .iter()
        .enumerate()
        .find(|(_, srv)| format!("port-{}", srv.id) == id)
    {
        Some((i, srv)) => Json(json!({"port": port_json(srv, i)})).into_response(),
        None => neutron_not_found("Port", &id),
    }
}

async fn get_network(Path(id): Path<String>) -> Response {
    if id == "network-private" {
        Json(
            json!({"network": {"id": id, "name": "private", "status": "ACTIVE",
            "admin_state_up": true, "subnets": ["subnet-private"], "tenant_id": "project-accept"}}),
        )
        .into_response()
    } else {
        neutron_not_found("Network", &id)
    }
}

fn neutron_not_found(kind: &str, id: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"NeutronError": {"type": format!("{kind}NotFound"), "message": format!("{kind} {id} could not be found.", ), "detail": ""}})),
    )
        .into_response()
}
