import sys

if "--scale" in sys.argv[1:]:
    from bench.scale import main
else:
    from bench.harness import main

sys.exit(main())
