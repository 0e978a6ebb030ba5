from hyperscope.cli.main import main

main()
