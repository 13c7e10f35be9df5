package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"jobkeeper.dev/jobkeeper/pkg/images"
)

// newImageCommand is `image`: the image store of jobkeeper up's node, for
// machines without registry access and for looking at what is stored.
func newImageCommand() *cobra.Command {
	var dataDir string
	if home, err := os.UserHomeDir(); err == nil {
		dataDir = filepath.Join(home, ".jobkeeper")
	}
	open := func() (*images.Store, error) {
		if dataDir == "" {
			return nil, errors.New("--data-dir must be set (no home directory to default to)")
		}
		return images.Open(filepath.Join(dataDir, "images"))
	}
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Load, tag, list, pull and remove the images jobkeeper up's node runs",
		Long: `Manage the image store of jobkeeper up (<data-dir>/images). It works while up runs on the
same data directory: pods see a loaded image at once.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of jobkeeper up, whose images/ holds the store.")
	cmd.AddCommand(newImageLoadCommand(open), newImageListCommand(open), newImageRemoveCommand(open), newImagePullCommand(open), newImageTagCommand(open))
	return cmd
}

// storeOpener opens the image store named by the flags.
type storeOpener func() (*images.Store, error)

// newImageLoadCommand is `image load`.
func newImageLoadCommand(open storeOpener) *cobra.Command {
	var input string
	cmd := &cobra.Command{
		Use:   "load [-i FILE | FILE]",
		Short: "Load images from a docker save tarball, an OCI archive or an OCI layout directory",
		Long: `Load images from a docker save tarball, an OCI archive (an OCI image layout in a tar, e.g.
from skopeo copy ... oci-archive:FILE) or an OCI image layout directory. FILE "-", or no FILE with
stdin not a terminal, reads stdin. Images are named by the archive's tags (docker: RepoTags; OCI:
the io.containerd.image.name or org.opencontainers.image.ref.name annotation).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if input != "" {
					return errors.New("give the file either with -i or as the argument, not both")
				}
				input = args[0]
			}
			in := cmd.InOrStdin()
			if input == "" {
				if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					return errors.New("no input: give a FILE, or pipe an archive to stdin")
				}
				input = "-"
			}
			s, err := open()
			if err != nil {
				return err
			}
			defer s.Close()
			var loaded []*images.Image
			switch fi, statErr := os.Stat(input); {
			case input == "-":
				loaded, err = s.Load(cmd.Context(), in)
			case statErr != nil:
				return statErr
			case fi.IsDir():
				loaded, err = s.LoadDir(cmd.Context(), input)
			default:
				f, oerr := os.Open(input)
				if oerr != nil {
					return oerr
				}
				defer f.Close()
				loaded, err = s.Load(cmd.Context(), f)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, img := range loaded {
				if len(img.Names) == 0 {
					fmt.Fprintf(out, "Loaded image ID: %s\n", img.ID)
				}
				for _, n := range img.Names {
					fmt.Fprintf(out, "Loaded image: %s\n", n)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&input, "input", "i", "", "Archive or OCI layout directory to load (\"-\" for stdin).")
	return cmd
}

// newImageListCommand is `image ls`.
func newImageListCommand(open storeOpener) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List stored images (as crictl images does)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := open()
			if err != nil {
				return err
			}
			defer s.Close()
			list, err := s.List()
			if err != nil {
				return err
			}
			return printImages(cmd.OutOrStdout(), list, quiet)
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "Print only image IDs.")
	return cmd
}

// printImages writes images as crictl images does: one row per tag (or
// per repository of a digest-only image), the ID shortened to 12 hex
// digits, the size in decimal units.
func printImages(w io.Writer, list []*images.Image, quiet bool) error {
	if quiet {
		for _, img := range list {
			fmt.Fprintln(w, img.ID)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tTAG\tIMAGE ID\tSIZE")
	for _, img := range list {
		id := strings.TrimPrefix(img.ID, "sha256:")
		if len(id) > 12 {
			id = id[:12]
		}
		size := humanSize(img.Size)
		rows := 0
		for _, n := range img.Names {
			repo, tag := n, "<none>"
			if i := strings.LastIndex(n, ":"); i > strings.LastIndex(n, "/") {
				repo, tag = n[:i], n[i+1:]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", repo, tag, id, size)
			rows++
		}
		for _, rd := range img.RepoDigests {
			repo, _, _ := strings.Cut(rd, "@")
			if !hasTagIn(img.Names, repo) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", repo, "<none>", id, size)
				rows++
			}
		}
		if rows == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", "<none>", "<none>", id, size)
		}
	}
	return tw.Flush()
}

// hasTagIn says whether names holds a tag of repo.
func hasTagIn(names []string, repo string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, repo+":") {
			return true
		}
	}
	return false
}

// humanSize writes bytes in decimal units with up to 4 significant
// digits, as crictl (docker/go-units HumanSize) does: "1.5kB", "2.22MB".
func humanSize(n int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	f := float64(n)
	i := 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	return fmt.Sprintf("%.4g%s", f, units[i])
}

// newImageRemoveCommand is `image rm`.
func newImageRemoveCommand(open storeOpener) *cobra.Command {
	return &cobra.Command{
		Use:     "rm REF...",
		Aliases: []string{"remove", "rmi"},
		Short:   "Remove images by name or ID (a tag of an image with several only untags it)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := open()
			if err != nil {
				return err
			}
			defer s.Close()
			var errs []error
			for _, ref := range args {
				if err := s.Remove(ref); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Deleted: %s\n", ref)
			}
			return errors.Join(errs...)
		},
	}
}

// newImagePullCommand is `image pull`.
func newImagePullCommand(open storeOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image for this machine's platform, with the credentials of your Docker config",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := open()
			if err != nil {
				return err
			}
			defer s.Close()
			img, err := s.Pull(cmd.Context(), args[0], images.PullOptions{Keychain: authn.DefaultKeychain})
			if err != nil {
				return fmt.Errorf("pulling %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Image is up to date for %s\n", img.ID)
			return nil
		},
	}
}

// newImageTagCommand is `image tag`.
func newImageTagCommand(open storeOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "tag SRC DST",
		Short: "Give a stored image another name, as docker tag does (DST moves from any image that had it)",
		Long: `Give the stored image SRC (a name, a name with a digest, or an image ID) the name DST too, so
that pods naming DST run it without a registry: e.g. load an archive, then tag it with the name your
manifests use. DST is a name with a tag (":latest" when none is given); an image that had it keeps
its other names. No registry is contacted.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := open()
			if err != nil {
				return err
			}
			defer s.Close()
			if _, err := s.Tag(args[0], args[1]); err != nil {
				return fmt.Errorf("tagging %s as %s: %w", args[0], args[1], err)
			}
			return nil
		},
	}
}
