from worker.cli.main import main

main()
