"""The chaos harness's TCP proxy (chaos.py): one between each worker and the coordinator,
so a connection can be cut and a restarted coordinator, which gets a new port, is reached
at the same address."""

import socket
import threading
import time


class Proxy:
    """A TCP proxy between one worker and the coordinator. cut() drops every connection
    through it and refuses new ones for a while; retarget() points it at a restarted
    coordinator."""

    def __init__(self, target):
        self.target = target
        self.lock = threading.Lock()
        self.conns = []
        self.refuse_until = 0.0
        self.closed = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def address(self):
        return "127.0.0.1:%d" % self.port

    def retarget(self, target):
        with self.lock:
            self.target = target

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                refuse = self.closed or time.time() < self.refuse_until
                target = self.target
            if refuse:
                client.close()
                continue
            host, port = target.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self, refuse_s):
        with self.lock:
            self.refuse_until = time.time() + refuse_s
            conns, self.conns = self.conns, []
        for pair in conns:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        with self.lock:
            self.closed = True
        self.cut(0)
        self.sock.close()
