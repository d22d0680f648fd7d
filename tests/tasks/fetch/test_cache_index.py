"""The download cache under concurrency and after killed runs."""
import os
import threading
import time

from storage.atomic import STALE_TEMP_S
from tasks.fetch.http import cache_dir, download, read_index


def test_concurrent_downloads_keep_every_index_entry(mirror, data_root):
    names = ["Newman/karate", "HB/west0067", "LPnetlib/lp_e226", "Pajek/Erdos971", "HB/jagmesh7"]
    urls = [f"{mirror.suitesparse_url}/MM/{name}.tar.gz" for name in names]
    threads = [threading.Thread(target=download, args=(url, data_root)) for url in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(read_index(data_root)) == set(urls)


def test_stale_partial_downloads_are_swept(mirror, data_root):
    folder = cache_dir(data_root)
    folder.mkdir(parents=True, exist_ok=True)
    stale, fresh = folder / ".tmp-download.killed", folder / ".tmp-download.running"
    for path in (stale, fresh):
        path.write_bytes(b"partial")
    old = time.time() - STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    download(f"{mirror.suitesparse_url}/MM/Newman/karate.tar.gz", data_root)
    assert not stale.exists() and fresh.exists()  # a writer still at work keeps its temp
