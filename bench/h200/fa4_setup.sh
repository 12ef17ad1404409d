# Source this on the lent H200 to make FlashAttention-4 importable from carried wheels (no network there):
#   . bench/h200/fa4_setup.sh .whl
# The folder holds flash-attn-4, nvidia-cutlass-dsl and its libs (-base, -core, -cu13: the last, 92 MB, travels in two
# calls as split parts, joined there with cat), quack-kernels, apache-tvm-ffi and torch-c-dlpack-ext; cuda-bindings,
# protobuf and einops are in the image. Everything lands in /tmp/site, which a .pth in the real site-packages adds
# (so the wheels' own .pth files run), and every python3 started afterwards, the app's spawned workers too, sees it.
W=${1:-.whl}
if ! python3 -c "import flash_attn.cute" 2>/dev/null; then
  mkdir -p /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$W"/*.whl || return 1
  echo "import site; site.addsitedir('/tmp/site')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz_fa4_site.pth"
fi
python3 -c "import flash_attn, flash_attn.cute; print('flash_attn', getattr(flash_attn, '__version__', '?'), 'ready')" \
  || echo "flash_attn: not importable (the fa4 variants will say unavailable)"
