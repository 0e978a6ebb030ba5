// The view in the URL, so that a pasted link opens what its sender saw:
//   #/<page>/<profile id>?node=…&rank=…&steps=A:B&k=N&t0=…&t1=…&open=…&sel=…&selrow=…
// One set of parameters per profile, shared by the pages (each reads its own keys: the dashboard
// its filters, the timeline its window, open rows and selection), so a tab switch keeps them.
// Pages write with replaceState: the address bar follows the view without filling the history or
// firing hashchange (which would route again).

export interface HashParts {
  route: string;
  profile: string | null;
  params: URLSearchParams;
}

const PROFILE_ID = /^[0-9a-f]{16}$/;

/** The route, the profile id (when the hash names one) and the view parameters of a hash. */
export function parseHash(hash: string): HashParts {
  const body = hash.replace(/^#\/?/, "");
  const q = body.indexOf("?");
  const path = (q < 0 ? body : body.slice(0, q)).split("/");
  const id = path[1] ?? "";
  return {
    route: path[0] ?? "",
    profile: PROFILE_ID.test(id) ? id : null,
    params: new URLSearchParams(q < 0 ? "" : body.slice(q + 1)),
  };
}

let forProfile: string | null = null;
let params = new URLSearchParams();
let route = "jobs";

/** Take a link's parameters as the view of its profile (a pasted link, back/forward). */
export function adoptLink(parts: HashParts): void {
  if (parts.profile && [...parts.params.keys()].length) {
    forProfile = parts.profile;
    params = new URLSearchParams(parts.params);
  }
}

/** The view parameters, when they are the given profile's (else none: a profile just loaded
 * from the Jobs page opens with its defaults). */
export function viewOf(profile: string): URLSearchParams {
  return forProfile === profile ? params : new URLSearchParams();
}

/** Set (or, with null or [], remove) parameters of the profile's view and rewrite the address. */
export function setView(profile: string, patch: Record<string, string | string[] | null>): void {
  if (forProfile !== profile) {
    forProfile = profile;
    params = new URLSearchParams();
  }
  for (const [key, value] of Object.entries(patch)) {
    params.delete(key);
    for (const v of value === null ? [] : Array.isArray(value) ? value : [value]) params.append(key, v);
  }
  // A page's late write (the timeline's is debounced) must not undo a tab click whose hashchange
  // has not been handled yet: the router writes the address, with these parameters, when it is.
  if ((parseHash(location.hash).route || "jobs") === route) writeHash(route, profile);
}

/** The canonical address of what is shown: the page, the loaded profile and its view. */
export function writeHash(page: string, profile: string | null): void {
  route = page;
  let hash = `#/${page}`;
  if (profile && page !== "jobs") {
    hash += `/${profile}`;
    const q = viewOf(profile).toString();
    if (q) hash += `?${q}`;
  }
  if (location.hash !== hash) history.replaceState(history.state, "", hash);
}
