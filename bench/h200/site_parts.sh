# FlashAttention-4 and the serving engines (FA3's forward, FlashInfer, cuDNN's frontend) onto the lent GPU in three
# calls, the machine held warm between them (no network there). Here, once:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 (and _2_24)
#     flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-{base,core,cu13}==4.8.1
#     quack-kernels==0.6.5 torch-c-dlpack-ext==0.1.5 ; unzip each into one folder beside engines_setup.sh's archive
#     unpacked (FlashInfer, fa3-fwd, cudnn-frontend, apache-tvm-ffi); tar cf - . | xz -9 (505 MB -> 90 MB);
#   split -n 3 -d -a 2 into .whl/a/allsite.part.00, .whl/b/allsite.part.01, .whl/c/allsite.part.02 (a call
#   carries 64 MiB with the tree, ~23 MiB of it the tree itself)
# There:  calls 1, 2 (carry .whl/a, then .whl/b): bash bench/h200/site_parts.sh keep
#         call 3 (carry .whl/c): bash bench/h200/site_parts.sh install   # then every python3 sees them all
case $1 in
keep) mkdir -p /tmp/keep && cp .whl/*/allsite.part.* /tmp/keep/ && ls -la /tmp/keep ;;
install)
  if ! python3 -c "import flash_attn.cute, fa3_fwd_interface, cudnn, flashinfer" 2>/dev/null; then
    mkdir -p /tmp/site
    mkdir -p /tmp/keep && cp .whl/*/allsite.part.* /tmp/keep/ 2>/dev/null
    cat /tmp/keep/allsite.part.* | xz -dc | tar xf - -C /tmp/site || exit 1   # the parts in name order
    echo "import site; site.addsitedir('/tmp/site')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz_site.pth"
  fi
  python3 -c "import flash_attn, flash_attn.cute; print('flash_attn', getattr(flash_attn, '__version__', '?'), 'ready')" \
    || echo "flash_attn: not importable (the fa4 variants will say unavailable)"
  python3 -c "import fa3_fwd_interface, cudnn, flashinfer; print('fa3-fwd, cudnn', cudnn.__version__, 'flashinfer', flashinfer.__version__, 'ready')" \
    || echo "engines: not importable (fa3, cudnn_fe, flashinfer will say unavailable)" ;;
esac
