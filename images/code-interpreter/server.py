"""The code interpreter server of Sandpit's code-interpreter template.

It listens on port 49999 inside the sandbox and speaks the protocol of
E2B's code interpreter, the one the @e2b/code-interpreter SDK uses:

  POST /execute {code, context_id, language, env_vars}
      streams one JSON object per line: stdout, stderr, result (a MIME
      bundle: text, html, png, ...), error (name, value, traceback),
      number_of_executions, end_of_execution.
  POST /contexts {language, cwd}   makes a context (its own kernel)
  GET /contexts                    lists them
  DELETE /contexts/<id>            shuts one down
  POST /contexts/<id>/restart      restarts its kernel
  GET /health                      200 once the default context is ready

Every context is a real Jupyter kernel driven over the Jupyter messaging
protocol (jupyter_client), so state persists between calls and display data
comes back as the kernel's MIME bundles. The server checks no token: the
daemon's gateway is the only way in and checks the sandbox's access token.

Only the standard library and jupyter_client are used, so the server runs
on Debian's packages as they are.
"""

import json
import os
import queue
import select
import socket
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client.manager import KernelManager

PORT = int(os.environ.get("SANDPIT_INTERPRETER_PORT", "49999"))
HOME = os.path.expanduser("~") if os.path.isdir(os.path.expanduser("~")) else "/"
STARTUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup.py")
# The languages this template has kernels for. E2B's names for the others
# get a clear error rather than a silent fallback to Python.
KERNELS = {"python": "python3", "r": "ir"}
KNOWN_LANGUAGES = {"python", "javascript", "typescript", "r", "java", "bash", "deno"}
# After a client disconnects mid-execution the kernel is interrupted; if it
# is still busy this long after, it is restarted.
INTERRUPT_GRACE = 10.0

# MIME types of a display bundle and the result fields E2B's SDK reads.
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "application/vnd.sandpit.chart+json": "chart",
    "application/vnd.e2b.data+json": "data",
}


def r_string(s):
    """An R string literal of s."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Per-language code that sets a call's variables (remembering what they
# were) and puts them back after it.
ENV_SET = {
    "python": lambda env: (
        "import os as __o, json as __j\n"
        "__sandpit_env_saved = {k: __o.environ.get(k) for k in %r}\n"
        "__o.environ.update(__j.loads(%r))" % (list(env), json.dumps(env))
    ),
    "r": lambda env: (
        ".sandpit_env <- jsonlite::fromJSON(%s)\n"
        ".sandpit_env_saved <- Sys.getenv(names(.sandpit_env), unset = NA, names = TRUE)\n"
        "do.call(Sys.setenv, .sandpit_env)" % r_string(json.dumps(env))
    ),
}
ENV_RESTORE = {
    "python": (
        "for __k, __v in __sandpit_env_saved.items():\n"
        "    __o.environ.pop(__k, None) if __v is None else __o.environ.__setitem__(__k, __v)\n"
        "del __sandpit_env_saved"
    ),
    "r": (
        "for (.k in names(.sandpit_env_saved)) { .v <- .sandpit_env_saved[[.k]]; "
        "if (is.na(.v)) Sys.unsetenv(.k) else do.call(Sys.setenv, setNames(list(.v), .k)) }\n"
        "rm(.sandpit_env, .sandpit_env_saved, .k, .v)"
    ),
}


def now():
    return datetime.now(timezone.utc).isoformat()


class ContextGone(Exception):
    pass


class Context:
    """One kernel and the lock that gives it one execution at a time."""

    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd or HOME
        self.lock = threading.Lock()
        self.km = None
        self.kc = None
        self.start()

    def start(self):
        env = dict(os.environ)
        # ipykernel's debugger warns on every start about frozen modules;
        # the warning would land in the start log, not help anyone.
        env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        km = KernelManager(kernel_name=KERNELS[self.language])
        km.start_kernel(cwd=self.cwd, env=env)
        kc = km.blocking_client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        self.km, self.kc = km, kc
        if self.language == "python" and os.path.exists(STARTUP):
            self.run_silent("exec(compile(open(%r).read(), %r, 'exec'))" % (STARTUP, STARTUP))

    def stop(self):
        try:
            self.kc.stop_channels()
        except Exception:
            pass
        try:
            self.km.shutdown_kernel(now=True)
        except Exception:
            pass

    def restart(self):
        self.stop()
        self.start()

    def run_silent(self, code, timeout=30):
        """Runs code that is not the user's: no history, no output relayed."""
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_shell_msg(timeout=1)
            except queue.Empty:
                if not self.km.is_alive():
                    raise ContextGone()
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]
        raise TimeoutError("kernel did not answer")

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class Contexts:
    def __init__(self):
        self.mu = threading.Lock()
        self.by_id = {}
        self.default = {}
        self.ready = threading.Event()
        self.failed = None

    def boot(self):
        try:
            self.default_for("python")
            self.ready.set()
        except Exception as e:  # reported by /health
            self.failed = repr(e)
            print("interpreter: default context failed: %r" % (e,), file=sys.stderr, flush=True)

    def create(self, language, cwd):
        ctx = Context(language, cwd)
        with self.mu:
            self.by_id[ctx.id] = ctx
        return ctx

    def default_for(self, language):
        with self.mu:
            ctx = self.default.get(language)
            if ctx is not None:
                return ctx
        ctx = self.create(language, HOME)
        with self.mu:
            if language in self.default:  # another request made it meanwhile
                keep = self.default[language]
                self.by_id.pop(ctx.id, None)
                ctx.stop()
                return keep
            self.default[language] = ctx
        return ctx

    def get(self, ctx_id):
        with self.mu:
            return self.by_id.get(ctx_id)

    def remove(self, ctx_id):
        with self.mu:
            ctx = self.by_id.pop(ctx_id, None)
            for lang, c in list(self.default.items()):
                if c is ctx:
                    del self.default[lang]
        if ctx is not None:
            ctx.stop()
        return ctx is not None

    def all(self):
        with self.mu:
            return list(self.by_id.values())


CONTEXTS = Contexts()


def language_of(name):
    name = (name or "python").strip().lower()
    if name in ("python3", "py"):
        name = "python"
    if name in ("js",):
        name = "javascript"
    if name in ("ts",):
        name = "typescript"
    return name


def unsupported(language):
    return "language %r has no kernel in this template; it has: %s" % (language, ", ".join(sorted(KERNELS)))


def result_of(content, main):
    out = {"type": "result", "is_main_result": main}
    for mime, value in content.get("data", {}).items():
        field = MIME_FIELDS.get(mime)
        if field is None:
            out[mime] = value
        else:
            out[field] = value
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sandpit-interpreter"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        # An execution is many small writes (the headers, then a chunk per
        # line); with Nagle's algorithm each waits for the client's delayed
        # ACK, about 40 ms a call.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # --- plumbing -------------------------------------------------------

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n == 0:
            return {}
        raw = self.rfile.read(n)
        try:
            v = json.loads(raw or b"{}")
        except ValueError:
            raise BadRequest("the body is not JSON")
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise BadRequest("the body must be a JSON object")
        return v

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status, message):
        self.send_json(status, {"error": message, "message": message})

    def send_empty(self, status=204):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def dispatch(self, method):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        try:
            if method == "GET" and parts == ["health"]:
                if CONTEXTS.ready.is_set():
                    data = b"OK"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self.send_error_json(503, CONTEXTS.failed or "the default context is starting")
            elif method == "POST" and parts == ["execute"]:
                self.execute(self.body())
            elif method == "POST" and parts == ["contexts"]:
                self.create_context(self.body())
            elif method == "GET" and parts == ["contexts"]:
                self.send_json(200, [c.describe() for c in CONTEXTS.all()])
            elif method == "DELETE" and len(parts) == 2 and parts[0] == "contexts":
                if CONTEXTS.remove(parts[1]):
                    self.send_empty()
                else:
                    self.send_error_json(404, "context %s not found" % parts[1])
            elif method == "POST" and len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
                ctx = CONTEXTS.get(parts[1])
                if ctx is None:
                    self.send_error_json(404, "context %s not found" % parts[1])
                    return
                with ctx.lock:
                    ctx.restart()
                self.send_empty()
            else:
                self.send_error_json(404, "no such route: %s %s" % (method, path))
        except BadRequest as e:
            self.send_error_json(400, str(e))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_DELETE(self):
        self.dispatch("DELETE")

    # --- contexts ---------------------------------------------------------

    def create_context(self, req):
        language = language_of(req.get("language"))
        if language not in KERNELS:
            self.send_error_json(400, unsupported(language))
            return
        cwd = req.get("cwd") or HOME
        if not os.path.isdir(cwd):
            self.send_error_json(400, "cwd %s is not a directory" % cwd)
            return
        ctx = CONTEXTS.create(language, cwd)
        self.send_json(200, ctx.describe())

    # --- execution --------------------------------------------------------

    def execute(self, req):
        code = req.get("code")
        if not isinstance(code, str):
            raise BadRequest("code is required")
        ctx_id = req.get("context_id")
        if ctx_id and req.get("language"):
            raise BadRequest("give context_id or language, not both")
        env = req.get("env_vars") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise BadRequest("env_vars must map names to strings")
        language = None
        if ctx_id:
            ctx = CONTEXTS.get(ctx_id)
            if ctx is None:
                self.send_error_json(404, "context %s not found" % ctx_id)
                return
        else:
            language = language_of(req.get("language"))
            ctx = None
            if language in KERNELS:
                ctx = CONTEXTS.default_for(language)

        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if ctx is None:
            name = "UnsupportedLanguage" if language in KNOWN_LANGUAGES else "UnknownLanguage"
            self.line({"type": "error", "name": name, "value": unsupported(language), "traceback": ""})
            self.line({"type": "end_of_execution"})
            self.end_stream()
            return
        with ctx.lock:
            self.run(ctx, code, env)
        self.end_stream()

    def line(self, obj):
        data = json.dumps(obj).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_stream(self):
        try:
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def client_gone(self):
        """Whether the client closed its end (it gave up: a timeout)."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def run(self, ctx, code, env):
        try:
            if env:
                # Per-call variables: set for this execution, the previous
                # values put back after it, as E2B's server does.
                ctx.run_silent(ENV_SET[ctx.language](env))
            self.relay(ctx, code)
        except ContextGone:
            self.kernel_died(ctx)
        except (BrokenPipeError, ConnectionResetError):
            self.interrupt(ctx)
        finally:
            if env and ctx.km.is_alive():
                try:
                    ctx.run_silent(ENV_RESTORE[ctx.language])
                except Exception:
                    pass

    def kernel_died(self, ctx):
        try:
            ctx.restart()
        except Exception:
            pass
        try:
            self.line({
                "type": "error",
                "name": "ContextRestarted",
                "value": "the kernel died and was restarted; the context's variables are gone",
                "traceback": "",
            })
            self.line({"type": "end_of_execution"})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def interrupt(self, ctx):
        """Stops the running code after the client went away, so that the
        context is free for the next call; a kernel that ignores the
        interrupt is restarted."""
        try:
            ctx.km.interrupt_kernel()
        except Exception:
            pass
        deadline = time.monotonic() + INTERRUPT_GRACE
        while time.monotonic() < deadline:
            try:
                msg = ctx.kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                self.drain_shell(ctx)
                return
        ctx.restart()

    def drain_shell(self, ctx):
        while True:
            try:
                ctx.kc.get_shell_msg(timeout=0.1)
            except queue.Empty:
                return

    def relay(self, ctx, code):
        kc = ctx.kc
        msg_id = kc.execute(code, store_history=True, allow_stdin=False)
        count = None
        # IRkernel sends a cell's value as display_data, not execute_result:
        # there the last display of a cell is taken for its value, held back
        # until the next output shows whether it was the last.
        held = None
        last_display_is_value = ctx.language != "python"
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=0.25)
            except queue.Empty:
                if not ctx.km.is_alive():
                    raise ContextGone()
                if self.client_gone():
                    raise BrokenPipeError()
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if held is not None and kind in ("stream", "execute_result", "display_data", "error"):
                self.line(held)
                held = None
            if kind == "display_data" and last_display_is_value:
                held = result_of(content, False)
            elif kind == "stream":
                self.line({"type": content["name"], "text": content["text"], "timestamp": now()})
            elif kind == "execute_result":
                count = content.get("execution_count", count)
                self.line(result_of(content, True))
            elif kind == "display_data":
                self.line(result_of(content, False))
            elif kind == "error":
                self.line({
                    "type": "error",
                    "name": content.get("ename", ""),
                    "value": content.get("evalue", ""),
                    "traceback": "\n".join(content.get("traceback", [])),
                })
            elif kind == "execute_input":
                count = content.get("execution_count", count)
            elif kind == "status" and content.get("execution_state") == "idle":
                break
        if held is not None:
            held["is_main_result"] = True
            self.line(held)
        # The shell reply of this execution (its count); others queued from
        # silent calls are skipped.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                reply = kc.get_shell_msg(timeout=0.5)
            except queue.Empty:
                break
            if reply["parent_header"].get("msg_id") == msg_id:
                count = reply["content"].get("execution_count", count)
                break
        if count is not None:
            self.line({"type": "number_of_executions", "execution_count": count})
        self.line({"type": "end_of_execution"})


class BadRequest(Exception):
    pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # A client that hangs up (a health probe, a timed-out call) is not
        # an error of the server's.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def main():
    srv = Server(("0.0.0.0", PORT), Handler)
    threading.Thread(target=CONTEXTS.boot, daemon=True).start()
    print("interpreter: listening on :%d" % PORT, file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
