# FlashAttention-4 onto the lent H200 in two calls, the machine held warm between them (no network there). Here:
#   mkdir -p .whl/a .whl/b; pip download (fa4_setup.sh's list) -d .whl/a; move nvidia_cutlass_dsl_libs_cu13's wheel
#   out, unzip it, `tar cf - . | xz -6` it (92 MB as a wheel, 66 MB so), split -b 38000000 into .whl/a and .whl/b
#   (a call carries 64 MiB with the tree).
# There:  call 1 (carry .whl/a): bash bench/h200/fa4_parts.sh keep
#         call 2 (carry .whl/b): bash bench/h200/fa4_parts.sh install     # then every python3 sees flash_attn.cute
case $1 in
keep) mkdir -p /tmp/keep && cp .whl/a/* /tmp/keep/ && ls /tmp/keep | wc -l ;;
install)
  if ! python3 -c "import flash_attn.cute" 2>/dev/null; then
    mkdir -p /tmp/site
    # the small wheels first: pip --target skips a folder that is already there, and libs-cu13 shares one
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/keep/*.whl
    cat /tmp/keep/cu13.part.* .whl/b/cu13.part.* | xz -d | tar x -C /tmp/site
    echo "import site; site.addsitedir('/tmp/site')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz_fa4_site.pth"
  fi
  python3 -c "import flash_attn, flash_attn.cute; print('flash_attn', getattr(flash_attn, '__version__', '?'), 'ready')" \
    || echo "flash_attn: not importable (the fa4 variants will say unavailable)" ;;
esac
