// The JSON API of `hyperscope ui` (docs/ui-api.md): typed fetches, errors carry the server's detail.

export type JobStatus = "InProgress" | "Completed" | "Failed" | "Stopped" | "Stopping";
export const STATUSES: JobStatus[] = ["InProgress", "Completed", "Failed", "Stopped", "Stopping"];

export interface Job {
  id: number;
  name: string;
  status: JobStatus;
  created_ns: number;
  updated_ns: number;
  nodes: string[];
  ranks: number;
  message: string;
  latest_profile: string | null;
  profiles: number;
  /** the newest profile's events, size on disk and traced span */
  events: number;
  bytes: number;
  duration_ns: number | null;
}

export interface JobList {
  total: number;
  jobs: Job[];
}

export interface ProfileSummary {
  id: string;
  created_ns: number;
  source: string;
  events: number;
  ranks: number;
  bytes: number;
  origin: string;
}

export interface JobDetail extends Job {
  profile_list: ProfileSummary[];
}

export interface DeviceInfo {
  index: number;
  name: string;
  memory_bytes: number | null;
}

export interface RankInfo {
  rank: number;
  node: string;
  local_rank: number;
  events: number;
  complete: boolean;
  /** every device the trace lists (all visible to the process) */
  devices: string[];
  /** the GPUs the rank's device-side events ran on */
  gpus: DeviceInfo[];
  source_file: string;
  notes: string[];
}

export interface ProfileInfo {
  id: string;
  job: string;
  job_id: number;
  status: JobStatus;
  source: string;
  created_ns: number;
  events: number;
  bytes: number;
  ts_min_ns: number;
  ts_max_ns: number;
  world_size: number;
  hosts: string[];
  ranks: RankInfo[];
  settings: Record<string, unknown>;
  notes: string[];
}

export interface Filters {
  nodes: string[];
  ranks: number[];
  steps: { min: number; max: number } | null;
  annotations: string[];
  /** each rank's node(s), by rank ("" for an unnamed node) */
  rank_nodes?: Record<string, string[]>;
}

export type Row = Record<string, string | number | boolean | null>;

export interface Table {
  title: string;
  columns: string[];
  rows: Row[];
  notes: string[];
}

export interface Dashboard {
  tables: Record<string, Table>;
  scope: { nodes: string[] | null; ranks: number[] | null; steps: string | null } | Record<string, unknown>;
  elapsed_ms: number;
}

export interface AnnotationHistogram {
  stats: Row | null;
  histogram: Table;
}

/** What the filter bar asks for; empty lists and nulls mean "all". */
export interface Scope {
  nodes: string[];
  ranks: number[];
  steps: { from: number; to: number } | null;
  topK: number;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
    readonly url: string,
  ) {
    super(`${status}: ${detail}`);
  }
}

type Params = Record<string, string | number | (string | number)[] | null | undefined>;

export function query(params: Params): string {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    for (const v of Array.isArray(value) ? value : [value]) q.append(key, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

async function get<T>(path: string, params: Params = {}, signal?: AbortSignal): Promise<T> {
  return call<T>(`/api${path}${query(params)}`, { headers: { Accept: "application/json" }, signal });
}

async function post<T>(path: string, body: unknown): Promise<T> {
  const headers = { Accept: "application/json", "Content-Type": "application/json" };
  return call<T>(`/api${path}`, { method: "POST", headers, body: JSON.stringify(body) });
}

async function call<T>(url: string, init: RequestInit): Promise<T> {
  let response: Response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    if (err instanceof DOMException && err.name === "AbortError") throw err;
    throw new ApiError(0, `the server did not answer (${String(err)}); is \`hyperscope ui\` running?`, url);
  }
  if (!response.ok) {
    let detail = response.statusText || "request failed";
    try {
      const body: unknown = await response.json();
      if (body && typeof body === "object" && "detail" in body) {
        const d = (body as { detail: unknown }).detail;
        detail = typeof d === "string" ? d : JSON.stringify(d);
      }
    } catch {
      /* not JSON: keep the status text */
    }
    throw new ApiError(response.status, detail, url);
  }
  return (await response.json()) as T;
}

export interface JobQuery {
  search: string;
  statuses: JobStatus[];
  createdAfterNs: string;
  createdBeforeNs: string;
  sort: "created" | "name" | "status" | "ranks" | "events" | "size";
  order: "asc" | "desc";
}

export function listJobs(q: JobQuery, signal?: AbortSignal): Promise<JobList> {
  return get<JobList>(
    "/jobs",
    {
      search: q.search.trim(),
      status: q.statuses,
      created_after_ns: q.createdAfterNs,
      created_before_ns: q.createdBeforeNs,
      sort: q.sort,
      order: q.order,
      limit: 1000,
    },
    signal,
  );
}

/** One full table of the Tables page, in the dashboard's scope (node, rank…, steps "A:B"). */
export function getTable(id: string, kind: string, scope: { node: string[]; rank: string[]; steps: string | null }): Promise<Table> {
  return get<Table>(`/profiles/${encodeURIComponent(id)}/tables/${encodeURIComponent(kind)}`, scope);
}

/** The download of a profile (or of the window [start, end) in epoch ns) as Chrome-trace JSON:
 * one rank's file, or a ZIP of one file per rank. */
export function exportUrl(id: string, window?: { start: string; end: string }): string {
  return `/api${`/profiles/${encodeURIComponent(id)}/export`}${query(window ? { start_ns: window.start, end_ns: window.end } : {})}`;
}

/** Starts a download of ``url`` (the server names the file). */
export function download(url: string): void {
  const a = document.createElement("a");
  a.href = url;
  a.download = "";
  document.body.append(a);
  a.click();
  a.remove();
}

export function getJob(idOrName: string | number): Promise<JobDetail> {
  return get<JobDetail>(`/jobs/${encodeURIComponent(String(idOrName))}`);
}

export function getProfile(id: string): Promise<ProfileInfo> {
  return get<ProfileInfo>(`/profiles/${encodeURIComponent(id)}`);
}

export function getFilters(id: string): Promise<Filters> {
  return get<Filters>(`/profiles/${encodeURIComponent(id)}/filters`);
}

function scopeParams(scope: Scope): Params {
  const steps = scope.steps ? `${scope.steps.from}:${scope.steps.to}` : null;
  return { node: scope.nodes, rank: scope.ranks, steps };
}

export function getDashboard(id: string, scope: Scope, signal?: AbortSignal): Promise<Dashboard> {
  return get<Dashboard>(
    `/profiles/${encodeURIComponent(id)}/dashboard`,
    { ...scopeParams(scope), top_k: scope.topK },
    signal,
  );
}

export function getAnnotationHistogram(id: string, name: string, scope: Scope): Promise<AnnotationHistogram> {
  return get<AnnotationHistogram>(
    `/profiles/${encodeURIComponent(id)}/annotations/${encodeURIComponent(name)}/histogram`,
    { ...scopeParams(scope), bins: 20 },
  );
}

// --- clusters (the Cluster page): GET /api/clusters, /api/clusters/{name} ---------------------

export interface ClusterSummary {
  name: string;
  provider: string;
  status: string;
  nodes: number;
  spares: number;
}

export interface ClusterNode {
  node: string;
  group: string;
  role: string;
  spare: boolean;
  status: string;
  slurm_state: string;
  responding: boolean | null;
  healthy: boolean | null;
  reason: string;
  replacements: number;
  last_action: string;
  straggler: string;
}

export interface RankSpeed {
  job: string;
  rank: number;
  node: string;
  step_s: number;
  median_s: number;
  score: number;
  named: boolean;
}

export interface CaptureStarted {
  catalog_job: string;
  profile_id: string;
  store: string;
  in_this_server: boolean;
  ranks: number[];
  start_step: number;
  steps: number;
  starts: Record<string, number>;
  notes: string[];
}

export interface Decision {
  time: number;
  kind: string;
  phase: string;
  nodes: string[];
  job: string | null;
  reason: string;
  error: string;
  seconds: number | null;
}

export interface Attempt {
  attempt: number;
  start_ns: number | null;
  end_ns: number | null;
  end_state: string;
  last_beat_ns: number | null;
}

export interface ClusterJob {
  id: number;
  name: string;
  state: string;
  nodes: string;
  restarts: number;
  attempts: Attempt[];
  goodput: { attempts: number; restarts: number; wall_s: number; training_s: number; lost_s: number; goodput: number | null };
}

export interface Cluster {
  name: string;
  provider: string;
  status: string;
  slurm_error: string;
  nodes: ClusterNode[];
  decisions: Decision[];
  jobs: ClusterJob[];
  stragglers: RankSpeed[];
}

export function listClusters(signal?: AbortSignal): Promise<{ clusters: ClusterSummary[] }> {
  return get<{ clusters: ClusterSummary[] }>("/clusters", {}, signal);
}

export function getCluster(name: string, signal?: AbortSignal): Promise<Cluster> {
  return get<Cluster>(`/clusters/${encodeURIComponent(name)}`, {}, signal);
}

/** "Profile now": what `hyperscope capture JOB --steps N` does; answers once the ranks record. */
export function captureJob(cluster: string, job: number, steps: number): Promise<CaptureStarted> {
  return post<CaptureStarted>(`/clusters/${encodeURIComponent(cluster)}/jobs/${job}/capture`, { steps });
}
